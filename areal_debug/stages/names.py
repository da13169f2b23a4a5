# SPDX-License-Identifier: Apache-2.0
"""The stages of a PPO step by name, and the key of a kept stage tensor (no torch:
reports, configs and the CLI read these)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    """What a comparison of a replay with its recording found: the one
    vocabulary of reports, stages and commands (a ``str``: JSON writes the
    value, and a value read back from JSON compares equal)."""

    IDENTICAL = "identical"  # bit for bit
    WITHIN_TOLERANCE = "within_tolerance"  # a step or metric: within verify_rtol/atol
    DIVERGED = "diverged"  # a step or metric: beyond the tolerance
    DIFFERS = "differs"  # a stage's digests (exact, no tolerance)
    NOT_COMPARED = "not_compared"  # with why (another layout, no digest kept)
    ABSENT = "absent"  # a stage this step does not run, with why (neither side has it)
    NOT_RECORDED = "not_recorded"  # a metric the recording does not have
    NOT_REPLAYED = "not_replayed"  # a recorded metric the replay did not commit
    INCOMPLETE = "incomplete"  # a step with metrics on one side only
    NO_RECORDED_STATS = "no_recorded_stats"  # a step the recording has no stats of


# The order a PPO step runs its stages in; "stats" are the committed statistics.
# "model": the actor's weights as a run's first step starts (after any checkpoint
# is restored), digested once per run: is the model the recorded one?
STAGES = (
    "model",
    "logp",
    "ref_logp",
    "values",
    "advantages",
    # AReaL after cbff54d (#1592): pure multi-objective distillation prepares the
    # batch with prepare_mopd_batch in place of compute_advantages.
    "mopd",
    "loss",
    "grads",
    "weights",
    "stats",
)
# Per-token stages whose full tensors may be stored (debug.record_stage_tensors).
TOKEN_STAGES = ("logp", "ref_logp", "values", "advantages")
# Stages whose digests are summed over data-parallel ranks (one global value per
# parameter); the others are per rank (each rank's own trajectories and micro-batches).
GLOBAL_STAGES = ("model", "grads", "weights")
# Digested once, at a run's first step: compared only where both sides have it.
MODEL_STAGE = "model"
# The stages of the update, run once per mini-batch (its micro-batches' losses, its
# gradients, the weights after its optimizer step): a step walks them mini-batch by
# mini-batch, each in this order.
UPDATE_STAGES = ("loss", "grads", "weights")
# stages.json's marker (docs/format.md): the weights are digested after each
# mini-batch's optimizer step ("mini-batch M <parameter>"). Absent in recordings
# made before: one digest per parameter after the whole update ("<parameter>").
WEIGHTS_PER_MINI_BATCH = "weights_per_mini_batch"
# What a stage tensor key starts with, before its rank.
_RANK = "rank "
# What a per-trajectory stage's entry name starts with, before its index.
_TRAJECTORY = "trajectory "
# What an update stage's entry name starts with, before its mini-batch.
_MINI_BATCH = "mini-batch "


def trajectory_name(index: int) -> str:
    """The entry name of trajectory ``index`` in a per-trajectory stage."""
    return f"{_TRAJECTORY}{index}"


def trajectory_index(name: str) -> int | None:
    """``trajectory_name`` undone; None for another entry name."""
    index = name.removeprefix(_TRAJECTORY)
    return int(index) if index != name and index.isdigit() else None


def step_order(stages: dict[str, dict[str, Any]]) -> list[str]:
    """The compared stages (``compare_stages``' results) in the order the step
    reaches them, so that the first one that differs is where the step first
    differs: the stages before the update in ``STAGES`` order, then the update
    mini-batch by mini-batch (the loss, gradients and weights of mini-batch 0,
    then of mini-batch 1, ...), each update stage at the mini-batch of its first
    difference (``"mini_batch"``; 0 when it has none) and weights compared only
    after the whole update (``"after_update"``, an older recording) after every
    mini-batch."""

    def position(stage: str) -> tuple[int, float, int]:
        if stage not in UPDATE_STAGES:
            return STAGES.index(stage), 0, 0
        result = stages[stage]
        mini_batch = result.get("mini_batch")
        if mini_batch is None:
            mini_batch = math.inf if result.get("after_update") else 0
        return STAGES.index(UPDATE_STAGES[0]), mini_batch, UPDATE_STAGES.index(stage)

    return sorted((s for s in STAGES if s in stages), key=position)


# Below the log-probs: each decoder layer's output per sample, digested in the
# forward pass that computes them (stages/layers.py). A per-rank stage compared
# only where the log-probs are, never a step's first divergent stage itself: it
# says where in the model the log-probs' difference starts.
LAYERS_STAGE = "layers"
_SAMPLE = " sample "
_AT = "@"


def layer_entry_name(trajectory: int, sample: int, position: int, module: str) -> str:
    """``"trajectory T sample S @P <module>"``: sample S (row) of trajectory T (the
    log-probs stage's entry) at the output of ``module``, the P-th module the
    forward pass ran (stages.json does not keep the order of its entries)."""
    return f"{trajectory_name(trajectory)}{_SAMPLE}{sample} {_AT}{position} {module}"


def split_layer_entry(name: str) -> tuple[int, int, int, str] | None:
    """``layer_entry_name`` undone: ``(trajectory, sample, position, module)``;
    None for another name."""
    head, sep, rest = name.partition(_SAMPLE)
    trajectory = trajectory_index(head)
    sample, _, rest = rest.partition(" ")
    position, _, module = rest.partition(" ")
    position = position.removeprefix(_AT)
    if not (sep and trajectory is not None and module):
        return None
    if not (sample.isdigit() and position.isdigit()):
        return None
    return trajectory, int(sample), int(position), module


# What names a kept row identity (the trajectory's tokens) after its index.
_TOKENS = " tokens"


def tokens_name(index: int) -> str:
    """The entry name under which a per-trajectory stage keeps trajectory
    ``index``'s tokens beside its values: which recorded rows they are, found by
    content on any rank, in whatever order AReaL redistributed them."""
    return f"{trajectory_name(index)}{_TOKENS}"


def tokens_index(name: str) -> int | None:
    """``tokens_name`` undone; None for another entry name."""
    head = name.removesuffix(_TOKENS)
    return trajectory_index(head) if head != name else None


# The actor's optimizer step count as a step starts (before its updates), among
# the step's statistics: a resumed run's is compared with the interrupted run's
# (inspect/resume.py), a replay's with the recording's like any statistic.
OPTIMIZER_SCOPE = "areal_debug/optimizer"
OPTIMIZER_STEPS = "steps_at_start"
OPTIMIZER_STEPS_STAT = f"{OPTIMIZER_SCOPE}/{OPTIMIZER_STEPS}"


def mini_batch_name(mini_batch: int, rest: str) -> str:
    """An update stage's entry name: ``"mini-batch M <rest>"`` (``rest`` a
    micro-batch or a parameter)."""
    return f"{_MINI_BATCH}{mini_batch} {rest}"


def split_mini_batch(name: str) -> tuple[int | None, str]:
    """``mini_batch_name`` undone: ``(M, rest)``; ``(None, name)`` for a name
    without a mini-batch (a trajectory, a weight of an older recording)."""
    if not name.startswith(_MINI_BATCH):
        return None, name
    head, sep, rest = name.removeprefix(_MINI_BATCH).partition(" ")
    if not (sep and rest and head.isascii() and head.isdigit()):
        return None, name
    return int(head), rest


class StageKeyError(ValueError):
    """A stage tensor's key is not ``"rank R/<stage>/<name>"``."""


@dataclass(frozen=True)
class StageTensorKey:
    """A kept stage tensor's key in ``stage_tensors.pt``: ``"rank R/<stage>/<name>"``
    (docs/format.md). ``format`` and ``parse`` are inverses: the string is the
    recording's contract, this type the only place that builds or reads it."""

    rank: int
    stage: str
    name: str

    def __post_init__(self):
        # Checked here too, so that every key built can be parsed back.
        if isinstance(self.rank, bool) or not isinstance(self.rank, int):
            raise StageKeyError(f"A stage tensor's rank is an int, not {self.rank!r}")
        if self.rank < 0 or not self.stage or "/" in self.stage or not self.name:
            raise StageKeyError(
                f"No stage tensor key for rank {self.rank!r}, stage {self.stage!r}, "
                f"name {self.name!r}: the rank is >= 0, the stage and name are not "
                "empty and the stage holds no '/'."
            )

    def format(self) -> str:
        return f"{_RANK}{self.rank}/{self.stage}/{self.name}"

    def __str__(self) -> str:
        return self.format()

    @classmethod
    def parse(cls, text: str) -> StageTensorKey:
        """The key ``text`` names; ``StageKeyError`` if it is not one."""
        head, _, rest = str(text).partition("/")
        stage, _, name = rest.partition("/")
        rank = head.removeprefix(_RANK)
        if not (isinstance(text, str) and head != rank and stage and name):
            raise _malformed(text)
        # Digits without a leading zero: parse(s).format() == s for every key.
        if not (rank.isascii() and rank.isdigit() and rank == str(int(rank))):
            raise _malformed(text)
        return cls(int(rank), stage, name)


def _malformed(text) -> StageKeyError:
    return StageKeyError(
        f"{text!r} is not a stage tensor key: expected "
        f"'{_RANK}R/<stage>/<name>', e.g. 'rank 0/logp/trajectory 3'."
    )
