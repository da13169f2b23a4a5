# SPDX-License-Identifier: Apache-2.0
"""The stages of a PPO step by name, and the key of a kept stage tensor (no torch:
reports, configs and the CLI read these)."""

from __future__ import annotations

from dataclasses import dataclass

# The order a PPO step runs its stages in; "stats" are the committed statistics.
STAGES = (
    "logp",
    "ref_logp",
    "values",
    "advantages",
    "loss",
    "grads",
    "weights",
    "stats",
)
# Per-token stages whose full tensors may be stored (debug.record_stage_tensors).
TOKEN_STAGES = ("logp", "ref_logp", "values", "advantages")
# Stages whose digests are summed over data-parallel ranks (one global value per
# parameter); the others are per rank (each rank's own trajectories and micro-batches).
GLOBAL_STAGES = ("grads", "weights")
# What a stage tensor key starts with, before its rank.
_RANK = "rank "
# What a per-trajectory stage's entry name starts with, before its index.
_TRAJECTORY = "trajectory "


def trajectory_name(index: int) -> str:
    """The entry name of trajectory ``index`` in a per-trajectory stage."""
    return f"{_TRAJECTORY}{index}"


def trajectory_index(name: str) -> int | None:
    """``trajectory_name`` undone; None for another entry name."""
    index = name.removeprefix(_TRAJECTORY)
    return int(index) if index != name and index.isdigit() else None


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
