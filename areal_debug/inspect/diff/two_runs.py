# SPDX-License-Identifier: Apache-2.0
"""``areal-debug diff``: where two recordings, or two replays, first part ways."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.compare.batches import BatchesDiff, compare_batches
from areal_debug.compare.replay import read_replay_stages
from areal_debug.compare.report import ReplayReport
from areal_debug.compare.stages import first_between, first_place
from areal_debug.compare.statistics import compare_values, training_stats
from areal_debug.inspect.common import (
    InspectError,
    is_recording,
    load_report,
    report_file,
    require_path,
    track,
)
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.stages.names import Verdict


@dataclass
class PayloadDifference:
    """The first place two recordings' batches differ."""

    step: int
    shard: int | None = None
    trajectory: int | None = None
    key: str | None = None
    # Index of the first differing element (row-major), or None for a shape,
    # dtype, type or count difference.
    element: list[int] | None = None
    a: Any = None
    b: Any = None
    what: str = ""


@dataclass
class RecordingDiff:
    a: str
    b: str
    steps_only_in_a: list[int]
    steps_only_in_b: list[int]
    # Steps whose payloads were compared (up to the first differing one) and
    # those identical among them.
    steps_compared: list[int]
    identical_steps: list[int]
    first: PayloadDifference | None
    # Every common step's batches by what each sample holds (prompts in order,
    # completions, rewards, versions) and the weights it started from; the
    # first step where the two part, and over the run, the prompts one run
    # consumed and the other did not or consumed more often.
    batches: BatchesDiff | None = None
    # The recorded statistics of the first differing step, side by side.
    stats_of_first: list[MetricRow] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return (
            self.first is None
            and not (self.steps_only_in_a or self.steps_only_in_b)
            and (self.batches is None or self.batches.first_step is None)
        )


@dataclass
class MetricRow:
    step: int
    metric: str
    a: float | None
    b: float | None
    abs_diff: float | None
    rel_diff: float | None
    status: str


@dataclass
class RunDiff:
    """Two runs' per-step statistics side by side (replay vs replay, or vs recording)."""

    a: str
    b: str
    a_label: str
    b_label: str
    steps: list[int]
    rows: list[MetricRow]
    first_divergence: MetricRow | None
    # A replay report's headline: how it went and what was changed.
    story: str | None = None
    # Two replays: the first step whose own stage digests differ between them
    # (``first_between``, with the layers under the log-probs), in words, and
    # whether they differ at all (None: not compared).
    stages: str | None = None
    stages_differ: bool | None = None

    @property
    def same(self) -> bool:
        return self.first_divergence is None and not self.stages_differ


# -- recordings ------------------------------------------------------------------
def diff_recordings(a: str, b: str) -> RecordingDiff:
    """Every common step's batches by what their samples hold (from the steps'
    metadata), then, step by step and shard by shard, the first element where
    the payloads differ."""
    ra, rb = RecordingReader(a), RecordingReader(b)
    sa, sb = set(ra.available_steps()), set(rb.available_steps())
    common = sorted(sa & sb)
    batches = compare_batches(ra, rb, common)
    identical, first = [], None
    for step in track(common, "Comparing steps", len(common)):
        first = _first_step_difference(ra, rb, step)
        if first is not None:
            break
        identical.append(step)
    stats = []
    # The statistics of the first step where the runs part, by payload or by
    # the weights it started from (payloads may match where the weights do not).
    parted = min(
        (
            s
            for s in (first.step if first else None, batches.first_step)
            if s is not None
        ),
        default=None,
    )
    if parted is not None:
        stats = _metric_rows(
            parted,
            training_stats(ra.recorded_stats(parted) or {}),
            training_stats(rb.recorded_stats(parted) or {}),
        )
        stats = [r for r in stats if r.status != Verdict.IDENTICAL]
    return RecordingDiff(
        a=os.path.abspath(a),
        b=os.path.abspath(b),
        steps_only_in_a=sorted(sa - sb),
        steps_only_in_b=sorted(sb - sa),
        steps_compared=identical + ([first.step] if first else []),
        identical_steps=identical,
        first=first,
        batches=batches,
        stats_of_first=stats,
    )


def _first_step_difference(
    ra: RecordingReader, rb: RecordingReader, step: int
) -> PayloadDifference | None:
    ma, mb = ra.step_meta(step), rb.step_meta(step)
    if ma.num_shards != mb.num_shards:
        # Different layouts: compare the global batches.
        return _first_batch_difference(
            step, None, ra.load_batch(step), rb.load_batch(step)
        )
    for shard, (ea, eb) in enumerate(zip(ma.shards, mb.shards)):
        if ea.entry.sha256 == eb.entry.sha256:
            continue  # same bytes on disk: same batch, nothing to load
        diff = _first_batch_difference(
            step, shard, ra.load_shard(step, shard), rb.load_shard(step, shard)
        )
        if diff is not None:
            return diff
    return None


def _first_batch_difference(
    step, shard, ba: list, bb: list
) -> PayloadDifference | None:
    for i, (ta, tb) in enumerate(zip(ba, bb)):
        found = _first_value_difference(ta, tb, "")
        if found is not None:
            key, element, va, vb, what = found
            return PayloadDifference(step, shard, i, key or None, element, va, vb, what)
    if len(ba) != len(bb):
        return PayloadDifference(
            step,
            shard,
            min(len(ba), len(bb)),
            None,
            None,
            len(ba),
            len(bb),
            "number of trajectories",
        )
    return None


def _first_value_difference(va, vb, key: str):
    """(key path, element, a, b, what) of the first difference, or None."""
    if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor):
        if va.dtype != vb.dtype:
            return key, None, str(va.dtype), str(vb.dtype), "dtype"
        if va.shape != vb.shape:
            return key, None, list(va.shape), list(vb.shape), "shape"
        # NaN == NaN here: a recording holding NaN at the same place is the same.
        same = (
            (va == vb) | (torch.isnan(va) & torch.isnan(vb))
            if va.is_floating_point()
            else va == vb
        )
        if bool(same.all()):
            return None
        flat = int((~same).reshape(-1).nonzero()[0])
        element = (
            list(torch.unravel_index(torch.tensor(flat), va.shape)) if va.dim() else []
        )
        element = [int(e) for e in element]
        return (
            key,
            element,
            va.reshape(-1)[flat].item(),
            vb.reshape(-1)[flat].item(),
            "value",
        )
    if type(va) is not type(vb):
        return key, None, type(va).__name__, type(vb).__name__, "type"
    if isinstance(va, dict):
        if set(va) != set(vb):
            only_a, only_b = (
                sorted(set(va) - set(vb), key=str),
                sorted(set(vb) - set(va), key=str),
            )
            return key, None, only_a, only_b, "keys (only in a, only in b)"
        for k in va:
            found = _first_value_difference(
                va[k], vb[k], f"{key}.{k}" if key else str(k)
            )
            if found is not None:
                return found
        return None
    if isinstance(va, list | tuple):
        if len(va) != len(vb):
            return key, None, len(va), len(vb), "length"
        for i, (x, y) in enumerate(zip(va, vb)):
            found = _first_value_difference(x, y, f"{key}[{i}]")
            if found is not None:
                return found
        return None
    if va != vb and not (isinstance(va, float) and math.isnan(va) and math.isnan(vb)):
        return key, None, va, vb, "value"
    return None


# -- replays -----------------------------------------------------------------------
def _metric_rows(
    step: int, a: dict[str, float], b: dict[str, float]
) -> list[MetricRow]:
    rows = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            rows.append(
                MetricRow(
                    step,
                    name,
                    a.get(name),
                    b.get(name),
                    None,
                    None,
                    "only in a" if name in a else "only in b",
                )
            )
            continue
        c = compare_values(a[name], b[name], 0.0, 0.0)
        rows.append(
            MetricRow(
                step, name, a[name], b[name], c["abs_diff"], c["rel_diff"], c["status"]
            )
        )
    return rows


def _first_divergent(rows: list[MetricRow]) -> MetricRow | None:
    """The diverged metric with the largest relative difference at the first step."""
    diverged = [r for r in rows if r.status == Verdict.DIVERGED]
    if not diverged:
        return None
    step = min(r.step for r in diverged)
    return max((r for r in diverged if r.step == step), key=lambda r: r.rel_diff)


def recording_series(path: str) -> dict[int, dict[str, float]]:
    """{step: {metric: value}} the dump run committed (complete steps with stats)."""
    reader = RecordingReader(path)
    out = {}
    for step in reader.available_steps():
        stats = reader.recorded_stats(step)
        if stats is not None:
            out[step] = training_stats(stats)
    return out


@dataclass
class Source:
    """A side of a comparison: a recording or a replay report, as a series."""

    path: str
    kind: str  # "recording" or "report"
    label: str
    series: dict[int, dict[str, float]]
    report: ReplayReport | None = None


def open_source(path: str) -> Source:
    """A recording directory, a replay report file, or a directory holding one."""
    require_path(path, "The path")
    if is_recording(path):
        return Source(
            os.path.abspath(path), "recording", "recorded", recording_series(path)
        )
    report = report_file(path)
    if report is None:
        raise InspectError(
            f"{path} is neither a recording (no manifest.json) nor a replay report "
            "(no replay_report.json). Give a recording directory, a "
            "replay_report.json, or the replay's log directory."
        )
    loaded = load_report(report)
    trial = os.path.basename(os.path.dirname(os.path.abspath(report)))
    return Source(
        os.path.abspath(report),
        "report",
        f"replay {trial}",
        loaded.series("replayed"),
        loaded,
    )


def pair(a: Source, b: Source | None) -> tuple[Source, Source]:
    """The two series to compare. One report alone: its recorded vs replayed values."""
    if b is not None:
        return a, b
    if a.kind != "report":
        raise InspectError(
            f"{a.path} is a recording: give a second recording or replay report to "
            "compare it with."
        )
    recording = a.report.recording
    recorded = Source(recording, "recording", "recorded", a.report.series("recorded"))
    # The recording's stats.json when it is still there (the report may be older).
    if is_recording(recording):
        recorded.series = {
            s: v for s, v in recording_series(recording).items() if s in a.series
        } or recorded.series
    return recorded, a


def diff_runs(a: Source, b: Source) -> RunDiff:
    """Per-step statistics of two runs side by side, and where they first diverge."""
    if a.kind == "report" and b.kind == "recording":
        a, b = b, a  # recorded first, replayed second
    steps = sorted(set(a.series) & set(b.series))
    if not steps:
        raise InspectError(
            f"{a.path} (steps {format_ranges(a.series)}) and {b.path} (steps "
            f"{format_ranges(b.series)}) have no step in common to compare."
        )
    rows = [
        r for step in steps for r in _metric_rows(step, a.series[step], b.series[step])
    ]
    report = b.report if b.report is not None else a.report
    stages = (None, None)
    if a.kind == b.kind == "report":
        stages = _stages_between(a, b, steps)
    return RunDiff(
        a.path,
        b.path,
        a.label,
        b.label,
        steps,
        rows,
        _first_divergent(rows),
        _story(report),
        *stages,
    )


def _stages_between(
    a: Source, b: Source, steps: list[int]
) -> tuple[str | None, bool | None]:
    """Two replays (a change bisected by replaying twice, no re-recording): the
    first step whose own digests (kept beside each report) differ, stage by
    stage and, under the log-probs, layer by layer (debug.layer_digests)."""
    compared = 0
    for step in steps:
        sa, sb = read_replay_stages(a.path, step), read_replay_stages(b.path, step)
        if sa is None or sb is None:
            continue
        _, first = first_between(sa, sb)
        compared += 1
        if first is not None:
            return (
                f"the two replays' stages first differ at step {step}: "
                f"{first['stage']} (first: {first_place(first)})",
                True,
            )
    if not compared:
        return None, None
    return (
        f"the two replays' stages are identical at every step compared ({compared})",
        False,
    )


def _story(report: ReplayReport | None) -> str | None:
    """The report's headline (computed from the report itself, also for one
    written before reports kept it)."""
    return None if report is None else report.headline()


def diff(a: str, b: str | None) -> RecordingDiff | RunDiff:
    """Two recordings: their payloads. Anything else: their per-step statistics."""
    require_path(a, "The path")
    if b is not None:
        require_path(b, "The path")
        if is_recording(a) and is_recording(b):
            return diff_recordings(a, b)
    sa = open_source(a)
    if b is None and sa.kind != "report":
        raise InspectError(
            "Give two paths (two recordings, two replay reports, or a report and a "
            "recording), or one replay report to compare with its recording."
        )
    return diff_runs(*pair(sa, open_source(b) if b is not None else None))
