# SPDX-License-Identifier: Apache-2.0
"""``areal-debug plot REC``: one recorded run's per-step statistics, before any replay.

The curves are the statistics AReaL exported at each step and the dump run kept in
the step's ``stats.json``; the picture marks the steps an anomaly trigger pinned
(``anomaly.json``, see :mod:`areal_debug.recording.anomaly`) and the steps that
are not whole on disk (no ``step.json``) or hold no statistics.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass, field

from areal_debug.inspect.common import InspectError
from areal_debug.inspect.diff.two_runs import recording_series
from areal_debug.inspect.listing import pinned_steps
from areal_debug.inspect.plots.two_runs import (
    DEFAULT_METRICS,
    MISMATCH,
    SEQUENCE_LENGTH,
    new_grid,
    save_figure,
    title_and_unit,
)
from areal_debug.recording.atomic import read_json
from areal_debug.recording.format import ANOMALY, RecordingError, list_step_dirs
from areal_debug.recording.reader import RecordingReader, format_ranges

# One recorded run: the two-run defaults, the sequence length (what the batch
# itself looked like, which a replay of the same batch never changes) and the
# training-inference mismatch.
RECORDING_METRICS = (*DEFAULT_METRICS, SEQUENCE_LENGTH, MISMATCH)

LINE = "#1f77b4"  # the recorded curve (matplotlib's blue, as in the two-run plot)
PIN = "#d62728"  # anomaly pins
INCOMPLETE = "#d9d2e9"  # steps not whole on disk, or without statistics (opaque)


@dataclass
class Anomaly:
    """A step an anomaly trigger fired at, and why (its ``anomaly.json``)."""

    step: int
    reasons: list[str]


@dataclass
class RecordingPlotResult:
    path: str
    recording: str
    label: str  # experiment/trial
    metrics: list[str]
    # Steps drawn: complete, with recorded statistics.
    steps: list[int]
    anomalies: list[Anomaly] = field(default_factory=list)
    # Steps retention keeps (anomaly pins with the steps before them, pin_steps).
    pinned: list[int] = field(default_factory=list)
    # Marked, not drawn: no step.json, or a complete step with no stats.json.
    incomplete: list[int] = field(default_factory=list)
    without_stats: list[int] = field(default_factory=list)


def anomalies(reader: RecordingReader) -> list[Anomaly]:
    """Every step the dump run found anomalous, with the triggers that fired."""
    found = []
    for step, step_dir in list_step_dirs(reader.path).items():
        path = os.path.join(step_dir, ANOMALY)
        if not os.path.exists(path):
            continue
        data = read_json(path, "anomaly pin")
        reasons = data.get("reasons") if isinstance(data, dict) else None
        if not isinstance(reasons, list):
            raise RecordingError(
                f"{path} is not an anomaly pin (no 'reasons' list). The file was "
                "edited or damaged; restore it from a copy or delete it."
            )
        found.append(Anomaly(step, [str(r) for r in reasons]))
    return found


def choose_metrics(
    path: str, series: dict[int, dict[str, float]], wanted: list[str] | None
) -> list[str]:
    """``wanted`` (checked against the recording), else the defaults it has."""
    have = set().union(*series.values())
    sample = ", ".join(sorted(have)[:8])
    if wanted:
        missing = [m for m in wanted if m not in have]
        if missing:
            raise InspectError(
                f"Metric(s) {missing} are not in the statistics recorded at {path} "
                f"(it has e.g. {sample}; `areal-debug show {shlex.quote(path)} --step N` lists "
                "them all)."
            )
        return list(wanted)
    chosen = [m for m, _, _ in RECORDING_METRICS if m in have]
    if not chosen:
        raise InspectError(
            f"The statistics recorded at {path} hold none of the usual PPO ones "
            f"(loss, grad norm, reward); it has e.g. {sample}. Name the ones to plot "
            "with --metric."
        )
    return chosen


def plot_recording(
    path: str, out: str, metrics: list[str] | None = None, title: str | None = None
) -> RecordingPlotResult:
    """Draw the recorded run at ``path`` into ``out`` (PNG)."""
    reader = RecordingReader(path)
    complete = reader.available_steps()
    incomplete = reader.incomplete_steps()
    series = recording_series(path)
    if not series:
        raise InspectError(_no_statistics(path, complete, incomplete))
    names = choose_metrics(path, series, metrics)
    steps = sorted(series)
    m = reader.manifest
    result = RecordingPlotResult(
        path=os.path.abspath(out),
        recording=os.path.abspath(path),
        label=f"{m.experiment_name}/{m.trial_name}",
        metrics=names,
        steps=steps,
        anomalies=anomalies(reader),
        pinned=pinned_steps(reader),
        incomplete=incomplete,
        without_stats=[s for s in complete if s not in series],
    )
    _draw(result, series, title)
    return result


def _no_statistics(path: str, complete: list[int], incomplete: list[int]) -> str:
    if not complete:
        held = (
            f"no complete step (incomplete: {format_ranges(incomplete)})"
            if incomplete
            else "no step at all"
        )
        return (
            f"The recording {path} holds {held}, so no statistics to plot: the dump "
            "run stopped before it finished its first step. Record again and let at "
            "least one step finish."
        )
    return (
        f"The recording {path} holds no statistics: none of its complete steps "
        f"({format_ranges(complete)}) has stats.json, which a dump run "
        "(debug.dump_rollout_data=true) writes once AReaL commits each step's "
        "statistics. Record with the areal-debug trainer to plot the run; `areal-debug "
        f"show {path} --step N` shows what it did record."
    )


def _draw(
    r: RecordingPlotResult, series: dict[int, dict[str, float]], title: str | None
) -> None:
    n = len(r.metrics)
    # The legend goes in the grid's empty cell, or in a row of its own below.
    spare = n > 1 and n % 2 == 1
    fig, axes = new_grid(n, legend_row=not spare)
    anomalous = [a.step for a in r.anomalies]
    gaps = sorted(set(r.incomplete) | set(r.without_stats))
    every = sorted(set(r.steps) | set(gaps) | set(anomalous))
    for ax, name in zip(axes.flat, r.metrics):
        _panel(ax, name, series, r.steps, anomalous, gaps, every)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if spare:
        last = axes.flat[n]
        last.axis("off")
        last.legend(handles, labels, loc="center", fontsize=10, frameon=False)
    else:
        fig.legend(
            handles,
            labels,
            loc="lower center",
            ncol=len(handles),
            fontsize=9,
            frameon=False,
        )
    marks = [f"anomaly pins at {_steps(anomalous)}" if anomalous else "no anomaly pins"]
    if r.incomplete:
        marks.append(f"incomplete {_steps(r.incomplete)}")
    if r.without_stats:
        marks.append(f"no statistics at {_steps(r.without_stats)}")
    head = title or f"{r.label}: recorded run, {_steps(r.steps)}"
    fig.suptitle(f"{head}\n{'; '.join(marks)}", fontsize=12)
    save_figure(fig, r.path, bottom=0.0 if spare else 0.4 / fig.get_figheight())


def _panel(ax, name, series, steps, anomalous, gaps, every) -> None:
    title, unit = title_and_unit(name)
    xs = [s for s in steps if name in series[s]]
    ys = [series[s][name] for s in xs]
    ax.plot(xs, ys, "o-", color=LINE, lw=2.2, ms=7, label="recorded")
    for s in gaps:
        ax.axvspan(
            s - 0.4,
            s + 0.4,
            color=INCOMPLETE,
            zorder=0,
            label="incomplete or no statistics" if s == gaps[0] else None,
        )
    # Pins at the top of the panel: where the value is NaN or inf, and no point
    # is drawn, the step is still marked (and the value written under the pin).
    top = ax.get_xaxis_transform()
    if anomalous:
        # Headroom: the pins stand above the curve, not on it.
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + 0.25 * (hi - lo))
    for i, s in enumerate(anomalous):
        ax.axvline(s, color=PIN, ls=":", lw=1.3, zorder=1)
        ax.plot(
            [s],
            [0.97],
            "v",
            color=PIN,
            ms=10,
            transform=top,
            clip_on=False,
            label="anomaly (pinned)" if i == 0 else None,
        )
        value = series.get(s, {}).get(name)
        if value is not None and not math.isfinite(value):
            ax.text(
                s, 0.92, str(value), color=PIN, ha="center", va="top", transform=top
            )
    ax.set_title(name if title == name else f"{title}\n{name}", fontsize=9)
    ax.set_xlabel("global step")
    ax.set_ylabel(unit)
    if len(every) <= 20:
        ax.set_xticks(every)
    if every:
        ax.set_xlim(min(every) - 0.6, max(every) + 0.6)
    ax.grid(True, alpha=0.3)


def summary(r: RecordingPlotResult) -> str:
    """What was drawn, in words (the command's output)."""
    lines = [
        f"wrote {r.path}: {len(r.metrics)} metrics of the recorded run {r.label} "
        f"over {_steps(r.steps)}",
        f"  recording  {r.recording}",
    ]
    lines += [
        f"  {'panels' if i == 0 else '':<10} {name}" for i, name in enumerate(r.metrics)
    ]
    if r.anomalies:
        first = r.anomalies[0]
        lines.append(
            f"  anomalies  {_steps([a.step for a in r.anomalies])} (red pins); "
            f"step {first.step}: {'; '.join(first.reasons)}"
        )
    else:
        lines.append("  anomalies  none")
    if r.pinned:
        lines.append(f"  pinned     {_steps(r.pinned)} (kept by retention)")
    gaps = []
    if r.incomplete:
        gaps.append(f"incomplete {_steps(r.incomplete)}")
    if r.without_stats:
        gaps.append(f"no statistics at {_steps(r.without_stats)}")
    lines.append("  not drawn  " + ("; ".join(gaps) + " (shaded)" if gaps else "none"))
    return "\n".join(lines)


def _steps(steps: list[int]) -> str:
    """'step 3', 'steps 0-4, 7'."""
    return f"step{'s' if len(steps) > 1 else ''} {format_ranges(steps)}"
