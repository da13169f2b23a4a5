# SPDX-License-Identifier: Apache-2.0
"""The one door to AReaL: every private or undocumented AReaL symbol areal-debug uses.

Each entry names the AReaL file it mirrors and its location in both supported
wheels (1.0.4 and 2.0.0); ``tests/test_areal_contract.py`` checks every entry
against the installed AReaL, so a release that moves one fails that test, naming
it, instead of a training run on a cluster. Public, documented API
(``PPOTrainer``, ``PPOConfig``, ``load_expr_config``, ``areal.utils.logging``) is
imported where it is used.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shlex
import subprocess
import sys
import warnings
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as pkg_version
from typing import Any

from areal.trainer.rl_trainer import PPOTrainer
from areal.utils import logging

logger = logging.getLogger("DebugArealCompat")

# -- supported versions ---------------------------------------------------------------
# Each supported release line as [low, high): the contract test
# (tests/test_areal_contract.py) has passed on the release each line names.
SUPPORTED_AREAL = (
    ((1, 0, 4), (1, 1, 0)),
    ((2, 0, 0), (2, 1, 0)),
)
ALLOW_ANY_VERSION_ENV = "AREAL_DEBUG_ALLOW_ANY_AREAL"


class UnsupportedArealError(RuntimeError):
    """The installed AReaL is outside the ranges this areal-debug was checked against."""


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def installed_areal_version() -> str:
    """The installed AReaL's version string (its distribution, else ``__version__``)."""
    try:
        return pkg_version("areal")
    except PackageNotFoundError:  # an editable or vendored AReaL
        import areal

        return getattr(areal, "__version__", "0")


def installed_areal_build() -> dict[str, str]:
    """Which AReaL is installed, beyond its version: AReaL main and tag v2.0.0
    both say 2.0.0. ``version``; ``commit`` where the installation says which
    (pip's direct_url.json, PEP 610, for ``pip install git+...``; the git
    checkout of an editable install); ``files``, a digest of the installed
    files' hashes as the wheel's RECORD lists them, which tells two builds of
    one version apart wherever AReaL came from a wheel."""
    import hashlib
    import json
    from importlib.metadata import distribution

    build = {"version": installed_areal_version()}
    try:
        dist = distribution("areal")
    except PackageNotFoundError:
        return build
    origin = json.loads(dist.read_text("direct_url.json") or "{}")
    commit = (origin.get("vcs_info") or {}).get("commit_id")
    url = origin.get("url", "")
    if commit is None and url.startswith("file://") and origin.get("dir_info"):
        commit = _git_head(url[len("file://") :])
    if commit:
        build["commit"] = commit
    # Sources only: byte-compiled files and the metadata differ between
    # installations of one wheel.
    sources = sorted(
        line
        for line in (dist.read_text("RECORD") or "").splitlines()
        if line.startswith("areal/") and not line.split(",")[0].endswith(".pyc")
    )
    if sources:
        digest = hashlib.sha256("\n".join(sources).encode()).hexdigest()
        build["files"] = digest[:16]
    return build


def _git_head(path: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def describe_areal_build(build: dict[str, Any]) -> str:
    """``2.0.0 (commit cbff54d, files 1a2b...)``: one line for people."""
    extra = []
    if build.get("commit"):
        extra.append(f"commit {build['commit'][:12]}")
    if build.get("files"):
        extra.append(f"files {build['files']}")
    version = build.get("version") or "?"
    return f"{version} ({', '.join(extra)})" if extra else version


# What a different AReaL can move in a replay: its training code, not the
# recorded rollout batch, which is replayed as it was.
AREAL_CHANGE_MOVES = (
    "the stages computed by AReaL's training code can move (recomputed "
    "log-probs, advantages, loss, gradients, weights); the rollout batches are "
    "replayed as recorded"
)


def areal_build_change(
    recorded: dict[str, Any] | None, recorded_version: str | None
) -> str | None:
    """How the installed AReaL differs from the one a recording was made with
    (its manifest's ``areal_build``, else only ``areal_version``), or ``None``.
    Builds are compared by what both say: the version, then the commit, then
    the files' digest."""
    current = installed_areal_build()
    recorded = dict(recorded or {})
    recorded.setdefault("version", recorded_version)
    if not recorded.get("version"):
        return None
    differs = any(
        recorded.get(key) and current.get(key) and recorded[key] != current[key]
        for key in ("version", "commit", "files")
    )
    if not differs:
        return None
    return (
        f"AReaL {describe_areal_build(current)} is installed, the recording was "
        f"made with AReaL {describe_areal_build(recorded)}"
    )


def areal_release(installed: str | None = None) -> tuple[int, int]:
    """(major, minor) of the installed AReaL: which form of a differing entry applies."""
    return _parse_version(installed or installed_areal_version())[:2]


def check_areal_version(installed: str | None = None) -> str:
    """Return the installed AReaL version; raise one clear error if unsupported.

    Setting ``AREAL_DEBUG_ALLOW_ANY_AREAL=1`` turns the error into a warning, for
    trying a new AReaL before ``tests/test_areal_contract.py`` has passed on it.
    """
    if installed is None:
        installed = installed_areal_version()
    parsed = _parse_version(installed)
    if any(low <= parsed < high for low, high in SUPPORTED_AREAL):
        return installed
    ranges = " or ".join(
        f">= {_dotted(low)}, < {_dotted(high)}" for low, high in SUPPORTED_AREAL
    )
    releases = " or ".join(
        f"areal=={_dotted(low)}" for low, _ in reversed(SUPPORTED_AREAL)
    )
    msg = (
        f"areal-debug supports AReaL {ranges}, but AReaL {installed} is installed. "
        "areal-debug reaches into AReaL's trainer, launchers and single-controller "
        "internals, which change between releases. Install a supported AReaL "
        f"(pip install {releases}), or set "
        f"{ALLOW_ANY_VERSION_ENV}=1 to try anyway after running "
        "tests/test_areal_contract.py against it."
    )
    if os.environ.get(ALLOW_ANY_VERSION_ENV) == "1":
        logger.warning(msg)
        return installed
    raise UnsupportedArealError(msg)


# -- the trainer's overridable hooks -----------------------------------------------------
class TrainerHooks(PPOTrainer):
    """AReaL's private ``PPOTrainer`` hooks (``areal/trainer/rl_trainer.py``) under
    public names. Subclasses override the public names; ``super()`` reaches the next
    class in the MRO, so a user's own ``PPOTrainer`` subclass composes."""

    # rl_trainer.py:915 (1.0.4), :927 (2.0.0) PPOTrainer._init_scheduler
    def _init_scheduler(self):
        return self.build_scheduler()

    def build_scheduler(self):
        return super()._init_scheduler()

    # rl_trainer.py:925 (1.0.4), :937 (2.0.0) PPOTrainer._create_dataloader
    def _create_dataloader(self, dataset, dataset_config, rank, world_size):
        return self.build_dataloader(dataset, dataset_config, rank, world_size)

    def build_dataloader(self, dataset, dataset_config, rank, world_size):
        return super()._create_dataloader(dataset, dataset_config, rank, world_size)

    # rl_trainer.py:951 (1.0.4), :963 (2.0.0) PPOTrainer._create_train_engine
    # (actor, ref, train teacher)
    def _create_train_engine(self, actor_config, alloc):
        return self.build_train_engine(actor_config, alloc)

    def build_train_engine(self, actor_config, alloc):
        return super()._create_train_engine(actor_config, alloc)

    # rl_trainer.py:978 (1.0.4), :990 (2.0.0) PPOTrainer._create_critic
    def _create_critic(self, critic_config, alloc):
        return self.build_critic(critic_config, alloc)

    def build_critic(self, critic_config, alloc):
        return super()._create_critic(critic_config, alloc)

    # rl_trainer.py:1005 (1.0.4), :1017 (2.0.0) PPOTrainer._init_rollout
    # (rollout and eval rollout)
    def _init_rollout(self, rollout_config, is_eval=False, lora_path=None):
        return self.build_inference_engine(rollout_config, is_eval, lora_path)

    def build_inference_engine(self, rollout_config, is_eval=False, lora_path=None):
        return super()._init_rollout(
            rollout_config, is_eval=is_eval, lora_path=lora_path
        )

    # rl_trainer.py:1092 (1.0.4), :1104 (2.0.0) PPOTrainer._init_teacher_rollout
    # (teacher.engine_type=rollout)
    def _init_teacher_rollout(self, rollout_config):
        return self.build_teacher_engine(rollout_config)

    def build_teacher_engine(self, rollout_config):
        return super()._init_teacher_rollout(rollout_config)

    # rl_trainer.py:1192 (1.0.4), :1204 (2.0.0) PPOTrainer._save_recover_checkpoint
    def _save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int):
        return self.save_recover_checkpoint(epoch, epoch_step, global_step)

    def save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int):
        return super()._save_recover_checkpoint(epoch, epoch_step, global_step)

    # rl_trainer.py:1241 (1.0.4), :1253 (2.0.0) PPOTrainer._evaluate
    def _evaluate(
        self, eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
    ):
        return self.evaluate(
            eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
        )

    def evaluate(
        self, eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
    ):
        return super()._evaluate(
            eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
        )

    # rl_trainer.py:1379 (1.0.4), :1391 (2.0.0) PPOTrainer._ensure_proxy_started
    # (agent workflows)
    def _ensure_proxy_started(self) -> None:
        return self.start_agent_proxy()

    def start_agent_proxy(self) -> None:
        return super()._ensure_proxy_started()

    # rl_trainer.py:1269 (1.0.4), :1281 (2.0.0) PPOTrainer._export_and_commit_stats
    def _export_and_commit_stats(self, epoch: int, epoch_step: int, global_step: int):
        return self.commit_step_stats(epoch, epoch_step, global_step)

    def commit_step_stats(self, epoch: int, epoch_step: int, global_step: int):
        return super()._export_and_commit_stats(epoch, epoch_step, global_step)

    # rl_trainer.py:875 (2.0.0) PPOTrainer.close begins with self.saver.finalize().
    # AReaL main's __init__ calls close() when construction fails (rl_trainer.py:121
    # at cbff54d), on a trainer that may have no saver yet: the AttributeError
    # would replace the error that stopped construction, and no worker would be
    # stopped. A half-built trainer is closed part by part instead.
    def close(self):
        if hasattr(self, "saver"):
            return super().close()
        return close_half_built(self)


# What PPOTrainer.close() destroys, in its order (rl_trainer.py:875-896, 2.0.0).
_CLOSED_PARTS = ("eval_rollout", "rollout", "teacher", "ref", "critic", "actor")


def close_half_built(trainer: Any) -> None:
    """Destroy whichever of the trainer's engines were built, then the scheduler's
    workers; each failure is logged, none raised, since the error being handled
    is construction's."""
    for name in _CLOSED_PARTS:
        part = trainer.__dict__.get(name)
        if part is None:
            continue
        try:
            part.destroy()
        except Exception as exc:  # noqa: BLE001 - construction's error is raised
            logger.warning(
                f"Closing a half-built trainer: {name}.destroy() failed: {exc!r}"
            )
    scheduler = trainer.__dict__.get("scheduler")
    if scheduler is not None:
        try:
            scheduler.delete_workers()
        except Exception as exc:  # noqa: BLE001
            logger.warning(
                f"Closing a half-built trainer: scheduler.delete_workers() failed: {exc!r}"
            )


def export_and_commit_stats(
    trainer: PPOTrainer,
    epoch: int,
    epoch_step: int,
    global_step: int,
    on_stats: Callable[[dict], None],
) -> None:
    """``PPOTrainer._export_and_commit_stats`` (rl_trainer.py:1269-1279 in 1.0.4,
    1281-1291 in 2.0.0) with ``on_stats`` called on the step's statistics just
    before they are committed."""
    import torch.distributed as dist
    from areal.infra import current_platform
    from areal.utils.environ import is_single_controller

    stats = trainer.actor.export_stats()
    stats.update(trainer.rollout.export_stats())
    if trainer.eval_rollout is not None:
        stats.update(trainer.eval_rollout.export_stats())
    on_stats(stats)
    trainer.stats_logger.commit(epoch, epoch_step, global_step, stats)
    if not is_single_controller():
        dist.barrier(group=trainer.actor.cpu_group)
        current_platform.synchronize()


def record_token_stats(scope: str, denominator: str, mask, **values) -> None:
    """Per-token statistics into AReaL's own stats tracker
    (areal/utils/stats_tracker.py: ``scope``, ``denominator``, ``stat``), so they
    are exported, reduced over data-parallel ranks (avg, min and max over the
    tokens of ``mask``) and committed with the step's statistics, and logged
    wherever AReaL logs them. ``mask`` a bool tensor, ``values`` float32 tensors
    of its shape."""
    from areal.utils import stats_tracker

    tracker = stats_tracker.get()
    with tracker.scope(scope):
        tracker.denominator(**{denominator: mask})
        tracker.stat(denominator=denominator, **values)


# -- trainer state read by areal-debug -------------------------------------------------
def single_controller_mode() -> bool:
    """areal/utils/environ.py:33 (1.0.4 and 2.0.0) is_single_controller: no
    AREAL_SPMD_MODE=1."""
    from areal.utils.environ import is_single_controller

    return is_single_controller()


def trains_on_cpu() -> bool:
    """areal/infra/platforms (platforms/__init__.py:93 ``current_platform``, 1.0.4
    and 2.0.0): the current platform's device is the CPU."""
    import torch
    from areal.infra import current_platform

    return torch.device(current_platform.current_device()).type == "cpu"


def recover_start_step(trainer: PPOTrainer) -> int:
    """The first step ``PPOTrainer.train`` runs (rl_trainer.py:562-566 in 1.0.4,
    574-578 in 2.0.0)."""
    info = trainer.recover_info
    return 0 if info is None else info.last_step_info.next().global_step


def last_recover_step(trainer: PPOTrainer) -> int | None:
    """The global step of the last recover checkpoint AReaL saved
    (areal/utils/recover.py:155, :255 in 1.0.4 and 2.0.0,
    RecoverHandler.last_step_info)."""
    info = getattr(trainer.recover_handler, "last_step_info", None)
    return None if info is None else info.global_step


def cpu_group(trainer: PPOTrainer):
    """The actor's gloo group PPOTrainer itself barriers on (SPMD only)."""
    return trainer.actor.cpu_group


def train_dp_size(trainer: PPOTrainer) -> int:
    """Training data-parallel size of the actor's allocation (rl_trainer.py:132
    in 1.0.4 and 2.0.0)."""
    return trainer.actor_alloc.parallel.dp_size


def train_world_size(trainer: PPOTrainer) -> int:
    return trainer.actor_alloc.parallel.world_size


def rollout_dp_size(trainer: PPOTrainer) -> int:
    return trainer.rollout_alloc.parallel.dp_size


def rollout_backend(trainer: PPOTrainer) -> str:
    return trainer.rollout_alloc.backend


def online_mode(trainer: PPOTrainer) -> bool:
    """rl_trainer.py:154 (1.0.4 and 2.0.0) ``_online_mode``
    (``rollout.agent.mode: online``): the trainer built its own
    ``_EmptyDataLoader`` (rl_trainer.py:202-219 in 1.0.4 and 2.0.0), not through
    ``_create_dataloader``."""
    return bool(trainer._online_mode)


def teacher_dp_size(trainer: PPOTrainer) -> int:
    """rl_trainer.py:183-198 (1.0.4 and 2.0.0) ``teacher_alloc``, from
    ``teacher.rollout.backend``."""
    return trainer.teacher_alloc.parallel.dp_size


def teacher_backend(trainer: PPOTrainer) -> str:
    return trainer.teacher_alloc.backend


def rollout_controller_version(rollout_config) -> str:
    """InferenceEngineConfig._version (areal/api/cli_args.py:2214 in 1.0.4, 2355 in
    2.0.0): v1 or v2."""
    return getattr(rollout_config, "_version", "v1")


def trial_log_dir(fileroot: str, experiment: str, trial: str) -> str:
    """The log directory AReaL's StatsLogger gives a trial
    (``<fileroot>/logs/<user>/<experiment>/<trial>``, utils/stats_logger.py:179
    in 1.0.4, 2.0.0 and main), without creating it as get_log_path does: a
    replay's trial is chosen by looking (contract check: the same path)."""
    import getpass

    return os.path.join(fileroot, "logs", getpass.getuser(), experiment, trial)


def stats_log_dir(trainer: PPOTrainer) -> str:
    """Where AReaL's StatsLogger writes this trial's logs
    (utils/stats_logger.py:165 in 1.0.4 and 2.0.0, StatsLogger.get_log_path)."""
    from areal.utils.stats_logger import StatsLogger

    return StatsLogger.get_log_path(trainer.config.stats_logger)


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


# -- single-controller internals -------------------------------------------------------
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


def scheduler_has_workers(scheduler: Any) -> bool:
    """LocalScheduler._workers (areal/infra/scheduler/local.py:172 in 1.0.4 and
    2.0.0) is non-empty."""
    return bool(getattr(scheduler, "_workers", None))


def importable_class(cls: type) -> type:
    """``cls`` or its nearest experiment-config base an RPC worker can import
    by ``module.__name__`` (areal/infra/rpc/serialization.py:290-336 in 1.0.4 and
    2.0.0)."""
    import importlib

    from areal.api.cli_args import BaseExperimentConfig

    for base in cls.__mro__:
        # Mixins (DebugSection) are importable but not experiment configs.
        if not (isinstance(base, type) and issubclass(base, BaseExperimentConfig)):
            continue
        try:
            module = importlib.import_module(base.__module__)
        except ImportError:
            continue
        if (
            base.__module__ != "__main__"
            and getattr(module, base.__name__, None) is base
        ):
            return base
    return cls


def send_importable_config(scheduler: Any, config) -> type | None:
    """Give the scheduler's workers a config class they can rebuild.

    AReaL's schedulers send ``exp_config`` to every worker's ``/configure``
    (infra/scheduler/local.py:1008-1030), which rebuilds it by import path and
    reads ``seed`` (infra/rpc/guard/engine_blueprint.py:212-219; both locations
    the same in 1.0.4 and 2.0.0). A class from
    the script's ``__main__`` cannot be imported there and comes back as a dict,
    so the worker fails. Workers then get the fields of its nearest importable
    base; returns that base when a substitution was made.
    """
    cls = type(config)
    base = importable_class(cls)
    if base is cls or getattr(scheduler, "exp_config", None) is not config:
        return None
    names = {f.name for f in dataclasses.fields(base) if f.init}
    scheduler.exp_config = base(**{n: getattr(config, n) for n in names})
    return base


def default_worker_commands() -> dict[str, str]:
    """The ``cmd`` AReaL gives each engine's RPC workers by default, by config
    class: ``SchedulingSpec(cmd="python -m areal.infra.rpc.rpc_server")`` of
    TrainEngineConfig.scheduling_spec and InferenceEngineConfig.scheduling_spec
    (api/cli_args.py:1193, :2161 in 1.0.4; :1250, :2302 in 2.0.0).
    ``determinism.configure_workers`` rewrites it to start its own worker."""
    from areal.api.cli_args import InferenceEngineConfig, TrainEngineConfig

    commands = {}
    for cls in (TrainEngineConfig, InferenceEngineConfig):
        specs = cls.__dataclass_fields__["scheduling_spec"].default_factory()
        commands[cls.__name__] = specs[0].cmd
    return commands


def run_rpc_server() -> None:
    """areal/infra/rpc/rpc_server.py:33 (1.0.4 and 2.0.0) main: the RPC worker's
    server, reading its own command line (the scheduling spec's ``cmd`` plus the
    scheduler's)."""
    from areal.infra.rpc import rpc_server

    rpc_server.main()


# -- Ray (scheduler.type: ray) ---------------------------------------------------------------
# RayScheduler starts workers as Ray actors (areal/infra/scheduler/ray.py:191-200
# (1.0.4, 2.0.0)): SchedulingSpec.cmd is never run, env_vars reach them through the
# runtime env. Ray runs the function named by this variable in each worker process
# before any actor (ray/_private/workers/default_worker.py:313-320;
# ray_constants.py:674; Ray's own files, ray 2.60.0 with either AReaL).
RAY_WORKER_SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
# AReaL's default (30 s) for worker start-up counts a worker's import of torch and
# AReaL; on a busy machine that takes longer.
RAY_MIN_STARTUP_TIMEOUT = 180.0


def ray_workers_are_actors() -> bool:
    """Whether RayScheduler runs its workers as Ray actors (1.0.4 and 2.0.0:
    areal/infra/rpc/ray_rpc_server.py), which never run the scheduling spec's
    ``cmd``. AReaL main (#1441) starts the same HTTP RPC worker as the local
    scheduler, from ``cmd``, inside a launcher actor, and has no such module."""
    import importlib.util

    return importlib.util.find_spec("areal.infra.rpc.ray_rpc_server") is not None


def is_ray_scheduler(scheduler: Any) -> bool:
    """areal/infra/scheduler/ray.py:58 (1.0.4 and 2.0.0) RayScheduler."""
    return type(scheduler).__name__ == "RayScheduler"


def lengthen_ray_startup(scheduler: Any) -> None:
    """RayScheduler.startup_timeout (ray.py:61-68 in 1.0.4 and 2.0.0): at least
    RAY_MIN_STARTUP_TIMEOUT."""
    if is_ray_scheduler(scheduler):
        current = getattr(scheduler, "startup_timeout", 0) or 0
        scheduler.startup_timeout = max(current, RAY_MIN_STARTUP_TIMEOUT)


def ray_connected() -> bool:
    import ray

    return ray.is_initialized()


# -- recover checkpoints ------------------------------------------------------------------
# The names PPOTrainer._save_recover_checkpoint saves its models under:
# ``dict(default=self.actor)`` and ``to_save["critic"]`` (rl_trainer.py:1194-1196 in
# 1.0.4, :1206-1208 in 2.0.0); "default" is also Saver.get_recover_checkpoint_path's
# default ``name`` (utils/saver.py:83 in 1.0.4 and 2.0.0).
RECOVER_ACTOR_NAME = "default"
RECOVER_CRITIC_NAME = "critic"


def recover_model_names(with_critic: bool) -> list[str]:
    """The models a recover checkpoint holds, by AReaL's names for them."""
    return [RECOVER_ACTOR_NAME] + ([RECOVER_CRITIC_NAME] if with_critic else [])


def recover_paths(config, trial: str, names: list[str]) -> tuple[str, dict[str, str]]:
    """(recover info dir, {model name: recover checkpoint dir}) of a trial:
    areal/utils/recover.py:168 RecoverHandler.recover_info_path and
    areal/utils/saver.py:79 Saver.get_recover_checkpoint_path (both the same in
    1.0.4 and 2.0.0)."""
    from areal.utils.recover import RecoverHandler
    from areal.utils.saver import Saver

    exp, root = config.experiment_name, config.cluster.fileroot
    info = RecoverHandler.recover_info_path(exp, trial, root)
    ckpts = {
        n: Saver.get_recover_checkpoint_path(exp, trial, root, name=n) for n in names
    }
    return info, ckpts


DATALOADER_INFO = "dataloader_info.pkl"


def write_dataloader_state(info_dir: str, state: dict, world_size: int) -> None:
    """Set the dataloader state a recover checkpoint restores.

    AReaL's RecoverInfo (areal/utils/recover.py:91, :125 in 1.0.4 and 2.0.0)
    writes and reads ``dataloader_info.pkl`` with pickle itself, one entry per rank
    in SPMD mode; areal-debug writes only plain JSON values into it.
    """
    with open(os.path.join(info_dir, DATALOADER_INFO), "wb") as f:
        pickle.dump([state] * world_size, f)


# -- allocation strings ------------------------------------------------------------------
def parse_allocation(alloc: str):
    """areal/api/alloc_mode.py:383 (1.0.4 and 2.0.0) _AllocationMode.from_str
    (:423; deprecation warnings silenced); raises what AReaL raises on a bad
    string."""
    from areal.api.alloc_mode import _AllocationMode

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _AllocationMode.from_str(alloc)


def allocation_train_world_size(alloc: str) -> int:
    return parse_allocation(alloc).train.world_size


def allocation_train_dp_size(alloc: str) -> int:
    """The training data-parallel size of ``alloc``: _AllocationMode.train
    (alloc_mode.py:539) ParallelStrategy.dp_size (:128; both in 1.0.4 and 2.0.0),
    as PPOTrainer reads it from ``actor_alloc`` (``train_dp_size``)."""
    return parse_allocation(alloc).train.dp_size


# AReaL reads a training layout in two places that never meet: its SPMD launchers
# start ``_AllocationMode.from_str(config.allocation_mode).train.world_size`` trainer
# processes (infra/launcher/local.py:295 and :383 in 1.0.4, :296 and :387 in 2.0.0;
# ray.py and slurm.py likewise), while PPOTrainer.__init__ builds each training
# engine from its own ``<key>.backend`` alone (trainer/rl_trainer.py: actor :132,
# critic :174-175, ref :180, teacher.train :192-193, the same lines in 1.0.4 and
# 2.0.0), never reading allocation_mode. The training engines, by config key:
TRAIN_ENGINE_KEYS = ("actor", "critic", "ref", "teacher.train")


def same_model_allocation(a: str, b: str) -> bool:
    """Whether two one-engine specs (``fsdp:d2``, ``fsdp[actor]:d2p1t1``,
    ``megatron:d2p2t1``) name the same backend and parallelism, read as PPOTrainer
    reads ``*.backend``: areal/api/alloc_mode.py ModelAllocation.from_str (:286)
    and ParallelStrategy.parallelism_eq (:180; Megatron's :242), the same in 1.0.4
    and 2.0.0. Names are ignored; raises what AReaL raises on a bad spec."""
    from areal.api.alloc_mode import ModelAllocation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, y = ModelAllocation.from_str(a), ModelAllocation.from_str(b)
    return (
        x.backend == y.backend
        and type(x.parallel) is type(y.parallel)
        and type(x.parallel).parallelism_eq(x.parallel, y.parallel)
    )


# -- config loading without side effects -----------------------------------------------
def compose_config(args: list[str], config_cls):
    """What AReaL's ``load_expr_config`` builds from ``args`` (``--config`` and
    overrides), without saving ``config.yaml`` into the run's log directory as it
    does: for tools that only read a config (``areal-debug doctor``).
    (api/cli_args.py parse_cli_args :3020, to_structured_cfg :3080 in 1.0.4;
    :3169, :3229 in 2.0.0.)"""
    from areal.api.cli_args import parse_cli_args, to_structured_cfg
    from omegaconf import OmegaConf

    cfg, _ = parse_cli_args(args)
    return OmegaConf.to_object(to_structured_cfg(cfg, config_cls=config_cls))


# -- launchers ----------------------------------------------------------------------------
def parse_launcher_cli_args(argv: list[str]):
    """The raw config AReaL's launchers compose (areal/infra/launcher/local.py
    parse_cli_args, imported at :21 from api/cli_args.py:3020 in 1.0.4, :3169 in
    2.0.0)."""
    from areal.infra.launcher import local as areal_local

    return areal_local.parse_cli_args(argv)[0]


def device_control_env_var() -> str:
    """The platform's visible-devices variable (empty on CPU)."""
    from areal.infra import current_platform

    return current_platform.device_control_env_var


def cpu_safe_local_launcher_class():
    """AReaL's LocalLauncher (areal/infra/launcher/local.py:87 in 1.0.4, 88 in
    2.0.0) with two CPU problems fixed, nothing else changed.

    1. ``CpuPlatform.device_control_env_var`` is empty, so AReaL emits
       ``=0 stdbuf ...`` and the shell fails: on CPU no device variable is set.
    2. Every job runs as ``cmd 2>&1 | tee log`` under /bin/sh, whose status is
       tee's, so a failed trainer looks finished and a finished one is reported
       as ``JobException(COMPLETED)``: run it under ``bash -o pipefail`` and keep
       the Popen, so the real exit status can be read.

    ``submit_array`` mirrors LocalLauncher.submit_array (local.py:121 in 1.0.4,
    122 in 2.0.0) and its private ``_jobs``, ``_job_counter``, ``_gpu_devices``,
    ``_gpu_counter``.
    """
    from areal.infra.launcher import local as areal_local

    class CpuSafeLocalLauncher(areal_local.LocalLauncher):
        extra_env: dict[str, str] = {}
        # Every process started, by job name; AReaL's stop_all forgets its own table.
        started: dict[str, subprocess.Popen] = {}

        def submit_array(self, job_name, cmd, count=1, gpu=0, env_vars=None):
            env_vars = {**(env_vars or {}), **self.extra_env}
            if not isinstance(cmd, list):
                cmd = [cmd] * count
            offset = self._job_counter[job_name]
            device_var = device_control_env_var()
            for i in range(count):
                job_env = dict(env_vars)
                if gpu > 0 and device_var:
                    devices = []
                    for _ in range(gpu):
                        devices.append(
                            self._gpu_devices[
                                self._gpu_counter % len(self._gpu_devices)
                            ]
                        )
                        self._gpu_counter += 1
                    job_env[device_var] = ",".join(str(d) for d in devices)
                c = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in job_env.items())
                log = shlex.quote(self.log_path_of(job_name))
                c = f"{c} stdbuf -oL {cmd[i]} 2>&1 | tee -a {log}"
                logger.info("Starting local process with command: %s", c)
                process = subprocess.Popen(
                    ["bash", "-o", "pipefail", "-c", c],
                    stdout=sys.stdout,
                    stderr=sys.stdout,
                )
                self._jobs[f"{job_name}/{offset + i}"] = process
                type(self).started[f"{job_name}/{offset + i}"] = process
                self._job_counter[job_name] += 1

        def forget_jobs(self) -> None:
            """Drop the job table without stopping anything (tests)."""
            self._jobs.clear()

    return CpuSafeLocalLauncher


def job_exception_types():
    """(JobException, JobState) of areal/infra/utils/launcher.py (:180, :168 in
    1.0.4; :181, :169 in 2.0.0)."""
    from areal.infra.utils.launcher import JobException, JobState

    return JobException, JobState


# RayLauncher.submit_array (ray.py:144 in 1.0.4, :145 in 2.0.0) and
# SlurmLauncher.submit_array (slurm.py:99 in 1.0.4, :100 in 2.0.0) take every job's
# environment as this parameter: a dict, for Slurm also a list of one per task.
LAUNCHER_ENV_PARAM = "env_vars"

LAUNCHER_CLASS_ATTR = {
    "local": "LocalLauncher",
    "ray": "RayLauncher",
    "slurm": "SlurmLauncher",
}


def _launcher_module(kind: str):
    import importlib

    return importlib.import_module(f"areal.infra.launcher.{kind}")


def launcher_class(kind: str):
    """The launcher class AReaL's ``<kind>_main`` instantiates
    (areal/infra/launcher/{local,ray,slurm}.py: LocalLauncher :87, RayLauncher
    :80, SlurmLauncher :52 in 1.0.4; :88, :81, :53 in 2.0.0), read at call time."""
    return getattr(_launcher_module(kind), LAUNCHER_CLASS_ATTR[kind])


def run_launcher_main(kind: str, config, argv: list[str], launcher_cls=None):
    """Run AReaL's ``<kind>_main(config, run_id=0)`` as if started with ``argv``
    (local_main, ray_main, slurm_main: local.py:270, ray.py:348, slurm.py:410 in
    1.0.4; :271, :349, :411 in 2.0.0).

    AReaL builds every job's command line from ``sys.argv``, so the argv is put
    there (shell-quoted) for the duration; ``launcher_cls`` replaces the module's
    launcher class for the duration. Both are restored here, also on failure.
    """
    module = _launcher_module(kind)
    attr = LAUNCHER_CLASS_ATTR[kind]
    original = getattr(module, attr)
    saved_argv = sys.argv
    sys.argv = [saved_argv[0]] + [shlex.quote(a) for a in argv]
    if launcher_cls is not None:
        setattr(module, attr, launcher_cls)
    try:
        return getattr(module, f"{kind}_main")(config, run_id=0)
    finally:
        sys.argv = saved_argv
        setattr(module, attr, original)
