# SPDX-License-Identifier: Apache-2.0
"""The engines: where a PPO step's stages are probed, what stands in for AReaL's
inference engine and where AReaL calls it, and the instance patches installed
where AReaL offers no hook (the SGLang version guard among them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from areal.trainer.rl_trainer import PPOTrainer


# -- where a PPO step's stages can be watched (SPMD: the engines are in-process) ----------
# PPOTrainer.train (rl_trainer.py:633-722 (1.0.4), :645-734 (2.0.0)) calls these
# on its engines, in this order, and then ppo_update (rl_trainer.py:722 (1.0.4),
# :734 (2.0.0)). PPOActor._ppo_update (trainer/ppo/actor.py:256 (1.0.4), :267
# (2.0.0)) splits the batch into ppo_n_minibatches mini-batches (:338 / :349) and
# calls the actor engine's train_batch(mb, loss_fn=..., loss_weight_fn=...) once
# per mini-batch (the loop at :345 / :356). FSDPEngine.train_batch
# (engine/fsdp_engine.py:760 (1.0.4, 2.0.0)) calls loss_fn once per micro-batch
# and then, once, self.optimizer_step() (:796), which clips the gradients first
# and steps the optimizer (fsdp_engine.py:682-713, the step at :705): the
# gradients are digested as it starts, the weights as it returns, so both once
# per mini-batch.
STAGE_METHODS = {
    "actor": ("compute_logp", "compute_advantages"),
    "actor_engine": ("train_batch", "optimizer_step"),
    "ref": ("compute_logp",),
    "critic": ("compute_values",),
}
# Probed where the engine has them: AReaL after cbff54d (#1592,
# areal/trainer/ppo/actor.py) prepares a pure-distillation step's batch with
# prepare_mopd_batch in place of compute_advantages; no installable build has it.
OPTIONAL_STAGE_METHODS = {"actor": ("prepare_mopd_batch",)}


def stage_engine_classes() -> dict[str, type]:
    """The AReaL class each stage role is probed on: FSDPPPOActor (actor, its
    engine methods, the reference) and FSDPPPOCritic (engine/fsdp_engine.py:2160,
    :2196 in 1.0.4; :2162, :2198 in 2.0.0), in SPMD mode and in the RPC workers
    (single_controller/probed_engines.py)."""
    from areal.engine import FSDPPPOActor, FSDPPPOCritic

    return {
        "actor": FSDPPPOActor,
        "actor_engine": FSDPPPOActor,
        "ref": FSDPPPOActor,
        "critic": FSDPPPOCritic,
    }


def stage_engines(trainer: PPOTrainer) -> dict[str, Any]:
    """The trainer's engines by role: actor, and ref / critic when the run has them."""
    engines = {"actor": trainer.actor}
    for role in ("ref", "critic"):
        engine = getattr(trainer, role, None)
        if engine is not None:
            engines[role] = engine
    return engines


def engine_named_parameters(engine: Any) -> list[tuple[str, Any]]:
    """The engine's model parameters (FSDPEngine.model, fsdp_engine.py:1007 in
    1.0.4, 1009 in 2.0.0), as stored: FSDP2 DTensor shards on each rank. Empty for
    an engine without one."""
    model = getattr(engine, "model", None)
    return list(model.named_parameters()) if model is not None else []


def engine_model(engine: Any) -> Any:
    """The engine's model (FSDPEngine.model, as engine_named_parameters reads it):
    the module whose forward computes the log-probs; None for an engine without."""
    return getattr(engine, "model", None)


def optimizer_steps(engine: Any) -> int | None:
    """How many steps the engine's optimizer has taken: torch's optimizers keep
    the count per parameter as state "step" (the AdamW of FSDPEngine.optimizer in
    1.0.4, 2.0.0 and main); 0 before the first step, None for an engine without
    a torch optimizer."""
    state = getattr(getattr(engine, "optimizer", None), "state", None)
    if not isinstance(state, dict):
        return None
    for per_parameter in state.values():
        step = per_parameter.get("step") if isinstance(per_parameter, dict) else None
        if step is None:
            continue
        if hasattr(step, "full_tensor"):  # a DTensor: the count is replicated
            step = step.full_tensor()
        return int(step.item() if hasattr(step, "item") else step)
    return 0


def engine_dp_group(engine: Any) -> tuple[Any, str]:
    """The engine's data-parallel group (FSDPEngine.dp_group, fsdp_engine.py:356
    in 1.0.4 and 2.0.0, over which train_batch sums its loss weights and FSDP
    shards the gradients) and the device its collectives take tensors on; (None,
    "cpu") where there is none (one process)."""
    import torch.distributed as dist

    group = getattr(engine, "dp_group", None)
    if group is None or not (dist.is_available() and dist.is_initialized()):
        return None, "cpu"
    return group, "cuda" if dist.get_backend(group) == "nccl" else "cpu"


@contextlib.contextmanager
def shadowed(obj: Any, name: str, stand_in: Callable) -> Iterator[None]:
    """``obj.name`` is ``stand_in`` inside the block (an instance attribute over
    whatever was there, patches included), and as before after it (``MethodPatches``
    puts it back): the blame passes read the gradients where
    FSDPEngine.train_batch calls ``self.optimizer_step()`` (fsdp_engine.py:796 in
    1.0.4 and 2.0.0, :810 on main), and take no step."""
    patches = MethodPatches()
    patches.wrap(obj, name, lambda _original: stand_in)
    try:
        yield
    finally:
        patches.remove_all()


def zero_gradients(engine: Any) -> None:
    """FSDPEngine.optimizer_zero_grad (fsdp_engine.py:678 in 1.0.4 and 2.0.0),
    as train_batch starts with."""
    zero = getattr(engine, "optimizer_zero_grad", None)
    if zero is not None:
        zero()
        return
    for _, p in engine_named_parameters(engine):
        p.grad = None


# -- what stands in for AReaL's inference engine (modes/engines.py) -------------------
def inference_engine_interface() -> type:
    """areal/api/engine_api.py:547 (1.0.4 and 2.0.0) InferenceEngine, the interface
    ReplayEngine and ReplayTeacher implement without subclassing it: a method a
    replay lacks then says why instead of raising a bare NotImplementedError."""
    from areal.api.engine_api import InferenceEngine

    return InferenceEngine


# Where AReaL calls its rollout engine while training: the class and the names it
# reaches the engine by. PPOTrainer (trainer/rl_trainer.py:105), the data-parallel
# heads' DistRolloutCoordinator (infra/dist_rollout.py:97) and the single
# controller's TrainController (infra/controller/train_controller.py:174; all three
# the same in 1.0.4 and 2.0.0).
ROLLOUT_ENGINE_CALLERS = {
    "areal.trainer.rl_trainer.PPOTrainer": ("self.rollout", "rollout"),
    "areal.infra.dist_rollout.DistRolloutCoordinator": ("self.rollout_engine",),
    "areal.infra.controller.train_controller.TrainController": (
        "self.rollout",
        "rollout",
    ),
}
# And its teacher served as an inference engine (teacher.engine_type=rollout).
TEACHER_ENGINE_CALLERS = {"areal.trainer.rl_trainer.PPOTrainer": ("self.teacher",)}


def workflow_engine(engine: Any) -> Any | None:
    """The engine a rollout engine's workflows call ``agenerate`` on: its workflow
    executor's (infra/workflow_executor.py:768 in 1.0.4, :793 on main; the
    RemoteInfEngine inside RemoteSGLangEngine), once the engine is initialised;
    None for an engine without one."""
    executor = getattr(engine, "workflow_executor", None)
    return getattr(executor, "inference_engine", None)


def note_agenerate_failures(
    engine: Any, patches: MethodPatches, note: Callable[[str], None]
) -> None:
    """Wrap ``engine.agenerate`` (a ``workflow_engine``) so that each exception it
    raises is handed to ``note`` as ``"Type: message"``, then raised on: AReaL's
    workflow executor logs such a rollout and rejects it, leaving no other trace."""

    def make(original):
        async def agenerate(*args, **kwargs):
            try:
                return await original(*args, **kwargs)
            except Exception as e:
                note(f"{type(e).__name__}: {e}")
                raise

        return agenerate

    patches.wrap(engine, "agenerate", make)


# -- instance patches (where AReaL offers no hook) ---------------------------------------
class MethodPatches:
    """Instance attributes replacing AReaL methods, installed and removed here only.

    Used for ``actor.prepare_batch`` (RNG states and the step clock at the point a
    step's batch is ready), ``actor.update_weights`` (nothing to send in replay),
    ``actor.clear_batches`` and the rollout controller's ``prepare_batch`` /
    ``rollout_batch`` (single-controller), which PPOTrainer calls directly.
    """

    def __init__(self):
        self._installed: list[tuple[Any, str, bool, Any]] = []

    def wrap(self, obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        """Replace ``obj.name`` by ``make(original)``."""
        had_own = name in getattr(obj, "__dict__", {})
        original = getattr(obj, name)
        self._installed.append((obj, name, had_own, obj.__dict__.get(name)))
        setattr(obj, name, make(original))

    def remove_all(self) -> None:
        while self._installed:
            obj, name, had_own, own = self._installed.pop()
            if had_own:
                setattr(obj, name, own)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass


# -- the sglang version guard ------------------------------------------------------------
def _pkg_version_module():
    from areal.utils import pkg_version as module

    return module


class SglangGuard:
    """AReaL's ``PPOTrainer._init_rollout`` (1.0.4 and 2.0.0) computes SGLang
    *server* arguments even in SPMD mode (``SGLangConfig.build_args``, the check at
    api/cli_args.py:1961 in 1.0.4, 2072 in 2.0.0), and that refuses to run unless
    the GPU-only ``sglang`` package is installed (``areal/utils/pkg_version.py:34
    is_version_greater_or_equal``, 1.0.4 and 2.0.0). When a CPU stand-in serves
    SGLang's protocol, that one check answers yes for sglang while the engine is
    built."""

    def __init__(self):
        self._original = None

    def relax(self) -> None:
        module = _pkg_version_module()
        if self._original is not None:
            return
        original = module.is_version_greater_or_equal
        self._original = original

        def relaxed(package_name: str, target_version: str) -> bool:
            if package_name == "sglang":
                return True
            return original(package_name, target_version)

        module.is_version_greater_or_equal = relaxed

    def restore(self) -> None:
        if self._original is not None:
            _pkg_version_module().is_version_greater_or_equal = self._original
            self._original = None
