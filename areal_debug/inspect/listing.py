# SPDX-License-Identifier: Apache-2.0
"""``areal-debug ls``: the recordings under a fileroot, and the replays run against them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from areal_debug.compare.coverage import Gap, coverage
from areal_debug.compare.report import REPORT_NAME, ReplayReport
from areal_debug.inspect.common import (
    is_recording,
    load_report,
    logger,
    require_path,
    track,
)
from areal_debug.inspect.resume import DRAWN_AHEAD, resume_positions
from areal_debug.recording.atomic import read_json
from areal_debug.recording.format import (
    ANOMALY,
    KEPT,
    SUPERSEDED,
    RecordingError,
    dir_bytes,
    kept_steps,
    list_step_dirs,
)
from areal_debug.recording.reader import RecordingReader, superseded_attempts
from areal_debug.stages.names import Verdict

# Directories no recording lives in: AReaL's own trees and a recording's insides.
_SKIP_DIRS = {"name_resolve", "checkpoints", KEPT, SUPERSEDED, "__pycache__"}


@dataclass
class ReplaySummary:
    """One replay report found for a recording."""

    report: str
    trial: str
    steps: list[int]
    identical_steps: int
    all_identical: bool
    first_divergence: dict[str, Any] | None
    topology_changed: bool
    # The replay's story (ReplayReport.headline): the first divergent stage and
    # where, what was changed, whether the model is the recorded one.
    headline: str | None = None

    @property
    def verdict(self) -> str:
        if not self.steps:
            return self.headline or "no steps"
        if self.all_identical:
            return Verdict.IDENTICAL
        first = self.first_divergence
        if first is None:
            return f"{self.identical_steps}/{len(self.steps)} identical, none diverged"
        return self.headline or (
            f"diverged at step {first['global_step']} ({first['metric']})"
        )


@dataclass
class RecordingSummary:
    """What ``ls`` says about one recording."""

    path: str
    experiment: str
    trial: str
    mode: str
    format_version: int
    areal_debug_version: str | None
    created: str
    steps: list[int]
    incomplete: list[int]
    pinned: list[int]
    checkpoints: list[int]
    stopped: list[dict[str, Any]]
    size_bytes: int
    replays: list[ReplaySummary] = field(default_factory=list)
    error: str | None = None
    # Resumes whose interrupted attempt had recorded steps again recorded
    # (superseded/<time>/): `areal-debug resume` checks them.
    resumes: int = 0
    # Those resumes that skipped batches AReaL had drawn ahead: their steps.
    drawn_ahead: list[int] = field(default_factory=list)
    # What kept steps lack (compare.coverage.Gap lines): the manifest's where
    # the dump run closed, measured from the steps' files otherwise.
    not_covered: list[str] = field(default_factory=list)


def find_recordings(root: str) -> list[str]:
    """Recording directories at or under ``root``, sorted."""
    require_path(root, "The directory")
    if is_recording(root):
        return [os.path.abspath(root)]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        if is_recording(dirpath):
            found.append(os.path.abspath(dirpath))
            dirnames[:] = []  # nothing to find inside a recording
            continue
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")
        )
    return sorted(found)


def find_reports(roots: list[str]) -> list[tuple[str, ReplayReport]]:
    """Every replay report (path, report) under ``roots``."""
    out, seen = [], set()
    for root in roots:
        if not os.path.isdir(root):
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
            if REPORT_NAME in filenames:
                path = os.path.realpath(os.path.join(dirpath, REPORT_NAME))
                if path in seen:
                    continue
                seen.add(path)
                try:
                    out.append((path, load_report(path)))
                except (RecordingError, ValueError) as e:
                    logger.warning(f"Skipping {path}: {e}")
    return out


def pinned_steps(reader: RecordingReader) -> list[int]:
    """Steps retention never deletes: anomaly pins and ``debug.pin_steps``."""
    pins: set[int] = set()
    debug = reader.manifest.config.get("debug") or {}
    pins.update(int(s) for s in debug.get("pin_steps") or [])
    for step, step_dir in list_step_dirs(reader.path).items():
        anomaly = os.path.join(step_dir, ANOMALY)
        if os.path.exists(anomaly):
            pins.update(int(s) for s in read_json(anomaly, "anomaly").get("pinned", []))
    return sorted(pins)


def summarize(path: str, reports: list[tuple[str, ReplayReport]]) -> RecordingSummary:
    """One recording's summary; a recording that cannot be read says why."""
    try:
        reader = RecordingReader(path)
    except RecordingError as e:
        return RecordingSummary(
            path,
            "?",
            "?",
            "?",
            0,
            None,
            "",
            [],
            [],
            [],
            [],
            [],
            dir_bytes(path),
            [],
            str(e),
        )
    m = reader.manifest
    real = os.path.realpath(path)
    replays = [
        _replay_summary(p, report)
        for p, report in reports
        if os.path.realpath(str(report.recording)) == real
    ]
    return RecordingSummary(
        path=path,
        experiment=m.experiment_name,
        trial=m.trial_name,
        mode=m.layout.mode,
        format_version=m.format_version,
        areal_debug_version=m.areal_debug_version,
        created=m.created,
        steps=reader.available_steps(),
        incomplete=reader.incomplete_steps(),
        pinned=pinned_steps(reader),
        checkpoints=kept_steps(path),
        stopped=reader.stopped(),
        size_bytes=dir_bytes(path),
        replays=sorted(replays, key=lambda r: r.report),
        resumes=len(superseded_attempts(reader)),
        drawn_ahead=[
            r.step for r in resume_positions(reader) if r.dataloader == DRAWN_AHEAD
        ],
        not_covered=not_covered(reader),
    )


def not_covered(reader: RecordingReader) -> list[str]:
    """What the recording's kept steps lack, one line each (compare.coverage)."""
    closed = reader.manifest.coverage
    if closed is not None and closed.get("steps") == reader.available_steps():
        return [Gap.from_json(g).line() for g in closed.get("gaps", [])]
    return coverage(reader).lines()


def _replay_summary(path: str, report: ReplayReport) -> ReplaySummary:
    steps = [e.global_step for e in report.steps]
    return ReplaySummary(
        report=path,
        trial=os.path.basename(os.path.dirname(path)),
        steps=steps,
        identical_steps=sum(e.status == Verdict.IDENTICAL for e in report.steps),
        all_identical=bool(steps)
        and all(e.status == Verdict.IDENTICAL for e in report.steps),
        first_divergence=report.first_divergence(),
        topology_changed=report.topology.changed,
        headline=report.headline(),
    )


def list_recordings(root: str) -> list[RecordingSummary]:
    """Every recording at or under ``root`` with the replays run against it.

    Replay reports are looked for under ``root`` and under each recording's own
    ``cluster.fileroot`` (AReaL's log directory of the replay trial is there).
    """
    paths = find_recordings(root)
    roots = [root]
    for p in paths:
        try:
            fileroot = (
                RecordingReader(p).manifest.config.get("cluster", {}).get("fileroot")
            )
        except RecordingError:
            continue
        if fileroot and os.path.isdir(fileroot):
            roots.append(fileroot)
    reports = find_reports(sorted(set(roots)))
    return [
        summarize(p, reports) for p in track(paths, "Reading recordings", len(paths))
    ]
