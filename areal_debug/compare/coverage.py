# SPDX-License-Identifier: Apache-2.0
"""What each recorded step holds, per rank, and what it lacks: coverage, measured.

A step's files are its record of what fired: ``step.json`` (every head's batch,
recorded once), ``stats.json`` (the committed statistics, with the mismatch's
``areal_debug/mismatch/*`` among them), ``stages.json`` (each rank's stage
digests, its layer digests where taken, and the global ones). Each is written
only where its probe or hook ran, so a hook AReaL no longer calls, a probe that
stopped on one rank, or a write that failed leaves the file or the rank's entry
out. What a step lacks against what the run set out to record is a ``Gap``; no
verdict speaks for it.

What the run set out to record: statistics at every step; stage digests at
every step where ``debug.stage_digests`` was on (each rank the per-rank stages
any step of the recording has, and the global stages); the mismatch and layer
digests wherever some step, or another rank of the step, has them. A part
missing from every step is named by the seams the dump run lacked (the
manifest's ``missing_seams``), not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from areal_debug.recording.reader import format_ranges
from areal_debug.stages.names import LAYERS_STAGE, MODEL_STAGE

STATISTICS = "statistics"
STAGES = "stage digests"
MISMATCH = "training-inference mismatch"
LAYERS = "layer digests"
# A step's statistics hold the mismatch where it was measured (stages/mismatch.py).
MISMATCH_KEY = "areal_debug/mismatch/n_tokens"


@dataclass(frozen=True)
class StepCoverage:
    """What one complete step holds: ``stages`` per rank (None: no stages.json)."""

    step: int
    statistics: bool
    mismatch: bool
    stages: list[frozenset[str]] | None
    global_stages: frozenset[str] = frozenset()

    @property
    def layers(self) -> list[bool]:
        return [LAYERS_STAGE in r for r in self.stages or []]


@dataclass(frozen=True)
class Gap:
    """A part of the record some steps (or some ranks of them) lack."""

    part: str
    steps: tuple[int, ...]
    ranks: tuple[int, ...] = ()  # () for the whole step
    what: str = ""  # the stage, for stage digests

    def line(self) -> str:
        name = f"{self.part} ({self.what})" if self.what else self.part
        where = f"step {format_ranges(self.steps)}"
        if len(self.steps) > 1:
            where = f"steps {format_ranges(self.steps)}"
        if self.ranks:
            where += f" on rank {format_ranges(self.ranks)}"
        return f"{name}: not recorded at {where}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Gap:
        """``to_json`` undone (a manifest's ``coverage``)."""
        return cls(
            str(data.get("part", "?")),
            tuple(int(s) for s in data.get("steps", [])),
            tuple(int(r) for r in data.get("ranks", [])),
            str(data.get("what", "")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "what": self.what,
            "steps": list(self.steps),
            "ranks": list(self.ranks),
        }


@dataclass
class Coverage:
    """A recording's steps, what each holds, and the gaps."""

    steps: list[StepCoverage] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [g.line() for g in self.gaps]

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [s.step for s in self.steps],
            "gaps": [g.to_json() for g in self.gaps],
        }


def step_coverage(reader, step: int) -> StepCoverage:
    """What complete step ``step`` of ``reader`` (a RecordingReader) holds."""
    stats = reader.recorded_stats(step)
    stages = reader.stage_digests(step)
    ranks = None
    global_stages: frozenset[str] = frozenset()
    if stages is not None:
        ranks = [frozenset(r) for r in stages["ranks"]]
        global_stages = frozenset(stages["global"])
    return StepCoverage(
        step,
        statistics=stats is not None,
        mismatch=stats is not None and MISMATCH_KEY in stats,
        stages=ranks,
        global_stages=global_stages,
    )


def coverage(reader, steps: list[int] | None = None) -> Coverage:
    """The coverage of ``steps`` (default: every complete step) of ``reader``."""
    chosen = reader.available_steps() if steps is None else steps
    covered = [step_coverage(reader, s) for s in chosen]
    debug = (reader.manifest.config or {}).get("debug", {})
    return Coverage(covered, gaps(covered, bool(debug.get("stage_digests", True))))


def gaps(steps: list[StepCoverage], stage_digests: bool = True) -> list[Gap]:
    """What the steps lack against what the run set out to record (module doc)."""
    found: dict[tuple[str, str, tuple[int, ...]], list[int]] = {}

    def lacks(part: str, step: int, ranks: tuple[int, ...] = (), what: str = ""):
        found.setdefault((part, what, ranks), []).append(step)

    per_rank = {n for s in steps for r in s.stages or [] for n in r} - {LAYERS_STAGE}
    global_ = {n for s in steps for n in s.global_stages} - {MODEL_STAGE}
    some_mismatch = any(s.mismatch for s in steps)
    for s in steps:
        if not s.statistics:
            lacks(STATISTICS, s.step)
        elif some_mismatch and not s.mismatch:
            lacks(MISMATCH, s.step)
        if s.stages is None:
            if stage_digests:
                lacks(STAGES, s.step)
            continue
        for name in sorted(per_rank):
            ranks = tuple(i for i, r in enumerate(s.stages) if name not in r)
            if ranks:
                whole = len(ranks) == len(s.stages)
                lacks(STAGES, s.step, () if whole else ranks, name)
        for name in sorted(global_ - s.global_stages):
            lacks(STAGES, s.step, (), name)
        layers = s.layers
        if any(layers) and not all(layers):
            lacks(LAYERS, s.step, tuple(i for i, on in enumerate(layers) if not on))
    return [
        Gap(part, tuple(sorted(at)), ranks, what)
        for (part, what, ranks), at in found.items()
    ]
