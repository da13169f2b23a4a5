# SPDX-License-Identifier: Apache-2.0
"""The seams: every private AReaL name areal-debug overrides, patches or relies on
being called, with the parameters it relies on and the capability it feeds,
declared once and checked on the installed AReaL at every start, whatever its
version says (a source checkout or a patched AReaL reports the version of the
installed one).

An override of a renamed hook is dead code: AReaL never calls it, and what it
fed (statistics recorded and compared, probes installed, checkpoints kept) stops
without a word. Here a missing or changed seam is named at start with what is
lost; the run goes on without that capability, is refused where nothing useful
is left (``Capability.RUN``), or on any with ``debug.require_all_seams=true``.
The contract test checks the table against each supported build.

Imports no AReaL at import time; ``check_seams`` imports the modules named.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from dataclasses import dataclass


class Capability(str, enum.Enum):
    """What a seam feeds: what a run loses without it."""

    RUN = "the run itself (nothing useful is left without it)"
    RECORD = "rollout batches recorded and replayed"
    STATISTICS = "statistics recorded and compared"
    STAGES = "stage digests (where a replay leaves the recording)"
    KEPT_CHECKPOINTS = (
        "recover checkpoints kept with the recording (replay from step N)"
    )
    EVALUATION = "evaluation left out of a replay"
    AGENT_PROXY = "no agent proxy started by a replay"
    TEACHER = "teacher log-probs recorded and replayed"
    WORKERS = "single-controller workers set up (importable config, probes)"
    FAILED_ROLLOUTS = "failed rollout requests pinned"
    LOSSLESS_RESUME = "lossless resume (debug.lossless_resume)"
    BLAME = "each sample's part in a step (debug.blame_steps)"


@dataclass(frozen=True)
class Seam:
    """``module:Qualified.name``, the parameters areal-debug relies on (AReaL
    calls the trainer's hooks by keyword, so their names are load-bearing), and
    how areal-debug uses it: ``override`` (a PPOTrainer method a subclass
    replaces), ``patch`` (an instance method replaced) or ``call``."""

    where: str
    capability: Capability
    how: str = "override"
    params: tuple[str, ...] = ()
    # A name only newer AReaL has (after main @cbff54d): used where present,
    # never reported missing.
    optional: bool = False

    @property
    def use(self) -> str:
        """How it is used, as the docs' table says it."""
        return f"{self.how}, where present" if self.optional else self.how

    @property
    def name(self) -> str:
        module, _, path = self.where.partition(":")
        return path or module

    def problem(self) -> str | None:
        """Why this AReaL does not offer the seam, or None."""
        module, _, path = self.where.partition(":")
        try:
            obj = importlib.import_module(module)
        except ImportError:
            return f"module {module} is missing"
        for part in path.split(".") if path else ():
            if not hasattr(obj, part):
                return f"{self.name} is missing"
            obj = getattr(obj, part)
        if not self.params:
            return None
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            return None
        names = set(signature.parameters)
        if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            return None
        lacking = [p for p in self.params if p not in names]
        if lacking:
            return f"{self.name} no longer takes {', '.join(lacking)}"
        return None


_TRAINER = "areal.trainer.rl_trainer:PPOTrainer"
_ACTOR = "areal.engine.fsdp_engine:FSDPPPOActor"
_CONTROLLER = "areal.infra.controller.rollout_controller:RolloutController"
_ACTOR_CONTROLLER = "areal.trainer.ppo.actor:PPOActorController"
_STEP = ("epoch", "epoch_step", "global_step")

# Every seam, by what it feeds (docs/usage.md "What areal-debug needs from AReaL"
# is made from this table).
SEAMS: tuple[Seam, ...] = (
    # The trainer's hooks (areal_compat.trainer.TrainerHooks).
    Seam(f"{_TRAINER}.train", Capability.RUN, "call", ("workflow", "eval_workflow")),
    Seam(f"{_TRAINER}.close", Capability.RUN, "call"),
    Seam(
        f"{_TRAINER}._init_rollout",
        Capability.RUN,
        params=("rollout_config", "is_eval", "lora_path"),
    ),
    Seam(
        f"{_TRAINER}._create_dataloader",
        Capability.RUN,
        params=("dataset", "dataset_config", "rank", "world_size"),
    ),
    Seam(f"{_TRAINER}._init_scheduler", Capability.WORKERS),
    Seam(
        f"{_TRAINER}._create_train_engine",
        Capability.STAGES,
        params=("actor_config", "alloc"),
    ),
    Seam(
        f"{_TRAINER}._create_critic",
        Capability.STAGES,
        params=("critic_config", "alloc"),
    ),
    Seam(
        f"{_TRAINER}._init_teacher_rollout",
        Capability.TEACHER,
        params=("rollout_config",),
    ),
    Seam(
        f"{_TRAINER}._save_recover_checkpoint",
        Capability.KEPT_CHECKPOINTS,
        params=_STEP,
    ),
    Seam(
        f"{_TRAINER}._evaluate",
        Capability.EVALUATION,
        params=("eval_workflow", "eval_workflow_kwargs", *_STEP),
    ),
    Seam(f"{_TRAINER}._ensure_proxy_started", Capability.AGENT_PROXY),
    Seam(f"{_TRAINER}._export_and_commit_stats", Capability.STATISTICS, params=_STEP),
    # The actor's stages (stages/probes.py) and the step's batch (modes/base.py).
    Seam(f"{_ACTOR}.prepare_batch", Capability.RECORD, "patch"),
    Seam(f"{_ACTOR}.update_weights", Capability.RECORD, "patch", ("meta",)),
    Seam(f"{_ACTOR}.compute_logp", Capability.STAGES, "patch", ("data",)),
    Seam(f"{_ACTOR}.compute_advantages", Capability.STAGES, "patch", ("data",)),
    Seam(f"{_ACTOR}.train_batch", Capability.STAGES, "patch", ("input_", "loss_fn")),
    Seam(f"{_ACTOR}.optimizer_step", Capability.STAGES, "patch"),
    # Each sample's part (stages/blame.py): train_batch again, its optimizer step
    # shadowed, AReaL's statistics put back.
    Seam(
        f"{_ACTOR}.train_batch",
        Capability.BLAME,
        "call",
        ("input_", "loss_fn", "loss_weight_fn"),
    ),
    Seam(f"{_ACTOR}.optimizer_zero_grad", Capability.BLAME, "call"),
    Seam("areal.utils.stats_tracker:DEFAULT_TRACKER", Capability.BLAME, "call"),
    # The reference's forward passes, counted (a replay with recorded reference
    # log-probs shows it never ran).
    Seam(f"{_ACTOR}.forward", Capability.STAGES, "patch"),
    # AReaL after cbff54d: pure distillation's stage (#1592) and the step's batch
    # collected in several prepare_batch calls (#1563).
    Seam(f"{_ACTOR}.prepare_mopd_batch", Capability.STAGES, "patch", optional=True),
    Seam(
        "areal.trainer.rl_trainer:_collect_trainable_rollout_batch",
        Capability.RECORD,
        "call",
        optional=True,
    ),
    Seam(
        "areal.engine.fsdp_engine:FSDPPPOCritic.compute_values",
        Capability.STAGES,
        "patch",
        ("data",),
    ),
    # Single-controller mode (modes/topology.py, areal_compat.single_controller).
    Seam(f"{_ACTOR_CONTROLLER}.prepare_batch", Capability.RECORD, "patch"),
    Seam(f"{_ACTOR_CONTROLLER}.clear_batches", Capability.RECORD, "patch"),
    Seam(f"{_CONTROLLER}.prepare_batch", Capability.RECORD, "patch"),
    Seam(f"{_CONTROLLER}.rollout_batch", Capability.RECORD, "patch"),
    Seam(f"{_CONTROLLER}.compute_logp", Capability.TEACHER, "patch"),
    Seam(f"{_CONTROLLER}.initialize", Capability.FAILED_ROLLOUTS, "patch"),
    # The rollout side (areal_compat.engines, areal_compat.draws).
    Seam(
        "areal.infra.remote_inf_engine:RemoteInfEngine.agenerate",
        Capability.FAILED_ROLLOUTS,
        "patch",
    ),
    Seam(
        "areal.infra.workflow_executor:BatchTaskDispatcher.submit_task_input",
        Capability.LOSSLESS_RESUME,
        "patch",
        ("task_input",),
    ),
    Seam(
        "areal.infra.workflow_executor:BatchTaskDispatcher.wait_results",
        Capability.LOSSLESS_RESUME,
        "call",
        ("count", "timeout"),
    ),
    # What the statistics, checkpoints and the replay's start read.
    Seam("areal.utils.stats_tracker:export", Capability.STATISTICS, "call"),
    Seam("areal.utils.recover:RecoverHandler", Capability.KEPT_CHECKPOINTS, "call"),
    Seam("areal.utils.saver:Saver.get_save_root", Capability.KEPT_CHECKPOINTS, "call"),
    Seam("areal.utils.data:split_and_unpad_tensor", Capability.RECORD, "call"),
)


@dataclass(frozen=True)
class MissingSeam:
    """A seam this AReaL does not offer, and what is lost."""

    seam: str
    problem: str
    capability: str

    def line(self) -> str:
        return f"{self.capability.split(' (')[0]} not available: {self.problem}"

    def to_json(self) -> dict[str, str]:
        return {
            "seam": self.seam,
            "problem": self.problem,
            "capability": self.capability,
        }


def check_seams(seams: tuple[Seam, ...] = SEAMS) -> list[MissingSeam]:
    """The seams the installed AReaL lacks or has changed (milliseconds: the
    trainer's modules are imported by then)."""
    missing = []
    for seam in seams:
        problem = seam.problem()
        if problem is not None and not seam.optional:
            missing.append(MissingSeam(seam.where, problem, seam.capability.value))
    return missing


def lost_capabilities(missing: list[MissingSeam]) -> list[str]:
    """The capabilities the missing seams take away, in the table's order."""
    lost = {m.capability for m in missing}
    return [c.value for c in Capability if c.value in lost]


def refuses(missing: list[MissingSeam]) -> bool:
    """Whether nothing useful is left: a seam the run itself needs is missing."""
    return Capability.RUN.value in {m.capability for m in missing}


_said: set[str] = set()


def check_seams_at_start(require_all: bool = False) -> list[MissingSeam]:
    """The seams this AReaL lacks, each named once per process with what is lost;
    raises ``UnsupportedArealError`` where the run itself needs one, or on any
    with ``require_all`` (``debug.require_all_seams``)."""
    from areal_debug.areal_compat.versions import (
        TESTED_AREAL,
        UnsupportedArealError,
        installed_areal_version,
        logger,
    )

    missing = check_seams()
    for m in missing:
        if m.seam not in _said:
            _said.add(m.seam)
            logger.warning(
                f"{m.line()} (AReaL {installed_areal_version()}; tested: {TESTED_AREAL})"
            )
    if missing and (require_all or refuses(missing)):
        why = (
            "debug.require_all_seams=true refuses any"
            if not refuses(missing)
            else "the run cannot go on without it"
        )
        raise UnsupportedArealError(
            f"This AReaL ({installed_areal_version()}) lacks what areal-debug hooks "
            f"into: {'; '.join(m.problem for m in missing)} ({why}; tested: "
            f"{TESTED_AREAL}). Install a tested AReaL, or an areal-debug that "
            "supports this one."
        )
    return missing
