# SPDX-License-Identifier: Apache-2.0
"""The single controller: its mode, the train controller's workers and engines,
RTensors, and the rollout controller attached to running servers
(areal/infra/controller/, areal/infra/rpc/rtensor.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def single_controller_mode() -> bool:
    """areal/utils/environ.py:33 (1.0.4 and 2.0.0) is_single_controller: no
    AREAL_SPMD_MODE=1."""
    from areal.utils.environ import is_single_controller

    return is_single_controller()


# -- the train controller's workers ----------------------------------------------------
def worker_engine_class(controller: Any) -> type:
    """The engine class a TrainController's workers build
    (train_controller.py:195 ``self.train_engine``, imported by name at :312; both
    in 1.0.4 and 2.0.0)."""
    return controller.train_engine


def use_worker_engine_class(controller: Any, engine_class: type) -> None:
    """Have the workers build ``engine_class`` instead (before ``initialize``)."""
    controller.train_engine = engine_class


def call_engines(controller: Any, method: str, *args) -> Any:
    """Call ``method`` on every worker's engine, the arguments broadcast from each
    data-parallel head (train_controller.py:471 in 1.0.4 and 2.0.0,
    ``_custom_function_call``, as PPOActorController.compute_logp calls it); the
    first head's result."""
    return controller._custom_function_call(method, *args, rpc_meta={"broadcast": True})


# -- RTensors ---------------------------------------------------------------------------
def rtensor_types():
    """(RTensor, TensorShardInfo) of areal/infra/rpc/rtensor.py (:372, :70 in 1.0.4
    and 2.0.0)."""
    from areal.infra.rpc.rtensor import RTensor, TensorShardInfo

    return RTensor, TensorShardInfo


def fetch_rtensor_shards(shards: list) -> list:
    """Fetch RTensor shards into fresh tensors (rtensor.py:292 get_backend().fetch,
    1.0.4 and 2.0.0)."""
    from areal.infra.rpc.rtensor import get_backend

    return get_backend().fetch(shards)


def unpad_trajectory(traj: dict) -> dict | None:
    """The padding trim ``RTensor.remotize`` applies (rtensor.py:429,
    areal/utils/data.py:313 split_and_unpad_tensor; both in 1.0.4 and 2.0.0), for
    one trajectory dict."""
    from areal.utils.data import split_and_unpad_tensor

    mask = traj["attention_mask"]
    compacted = split_and_unpad_tensor(
        traj, n_trajs=1, traj_group_sizes=[mask.shape[0]]
    )
    return None if compacted is None else compacted[0]


def train_item_weight(traj: dict) -> int:
    """The weight AReaL's train controller orders and balances trajectories by
    (areal/infra/controller/train_controller.py:61 _item_weight, 1.0.4 and
    2.0.0)."""
    from areal.infra.controller.train_controller import _item_weight

    return _item_weight(traj)


# -- the rollout controller, attached to running servers --------------------------------
def inference_server_info(host: str, port: int):
    """areal/api/io_struct.py:377 (1.0.4 and 2.0.0) LocalInfServerInfo of an
    already-running server."""
    from areal.api.io_struct import LocalInfServerInfo

    return LocalInfServerInfo(host=host, port=port, process=None)


def rollout_controller_class(backend: str):
    """The remote engine class whose ``as_controller`` builds the rollout controller
    (areal/engine/sglang_remote.py:588 in 1.0.4 and 2.0.0; vllm_remote.py:540 in
    1.0.4, 543 in 2.0.0)."""
    from areal.engine import RemoteSGLangEngine, RemotevLLMEngine

    engines = {"sglang": RemoteSGLangEngine, "vllm": RemotevLLMEngine}
    if backend not in engines:
        raise ValueError(
            f"Invalid rollout backend {backend!r}, expected one of {sorted(engines)}."
        )
    return engines[backend]


def rollout_controller_version(rollout_config) -> str:
    """InferenceEngineConfig._version (areal/api/cli_args.py:2214 in 1.0.4, 2355 in
    2.0.0): v1 or v2."""
    return getattr(rollout_config, "_version", "v1")


# -- the rollout controller's workers -----------------------------------------------------
def rollout_worker_engine_class(controller: Any) -> type | None:
    """The engine class a RolloutController's workers build (rollout_controller.py
    ``self.inf_engine``: :79 in 1.0.4 and 2.0.0, :82 on main; sent to the workers
    by module and name in ``_async_initialize``)."""
    return getattr(controller, "inf_engine", None)  # none on RolloutControllerV2


@contextmanager
def watch_rollout_workers(watched: dict[type, type]) -> Iterator[None]:
    """While inside, a RolloutController (v1) whose engine class is a key of
    ``watched`` has its workers build the value instead: ``initialize``
    (rollout_controller.py:158 in 1.0.4 and 2.0.0, :162 on main) creates the
    workers' engines, and PPOTrainer builds and initialises the controller in one
    call (``_init_rollout``), so the class is swapped as ``initialize`` starts."""
    from areal.infra.controller.rollout_controller import RolloutController

    original = RolloutController.__dict__["initialize"]

    def initialize(self, *args, **kwargs):
        self.inf_engine = watched.get(self.inf_engine, self.inf_engine)
        return original(self, *args, **kwargs)

    RolloutController.initialize = initialize
    try:
        yield
    finally:
        RolloutController.initialize = original


def call_rollout_workers(controller: Any, method: str) -> list:
    """Call ``method`` on every rollout worker's engine; each worker's result, in
    rank order (rollout_controller.py ``_collective_rpc``: :670 in 1.0.4 and
    2.0.0, :743 on main)."""
    return controller._collective_rpc(method)
