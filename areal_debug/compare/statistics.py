# SPDX-License-Identifier: Apache-2.0
"""Compare a replay's committed statistics with those recorded by the dump run.

Not to be confused with ``areal-debug verify``, which checks a recording's files.
"""

from __future__ import annotations

import math
from typing import Any

from areal_debug.compare.report import (
    OWN_PREFIX,
    ReplayReport,
    StepComparison,
    TopologyChange,
)
from areal_debug.compare.stages import describe, first_divergent_stage
from areal_debug.stages.names import Verdict

# Wall-clock timings differ between any two runs; they are not training results.
# AReaL after 2.1.0 adds train_perf/* (areal/utils/training_metrics.py: tokens,
# seconds and FLOPs per second of the step), timings with their throughput.
_TIMING_PREFIXES = ("timeperf/", "train_perf/")
# Scopes AReaL's WorkflowExecutor and workflows write to: inference-side
# statistics that a replay (which has no inference engine) cannot produce.
INFERENCE_PREFIXES = ("rollout/", "eval-rollout/")


def training_stats(stats: dict[str, Any]) -> dict[str, float]:
    """The statistics worth recording: everything committed except timings and counters."""
    out = {}
    for k, v in stats.items():
        if k.startswith(_TIMING_PREFIXES + INFERENCE_PREFIXES) or k.endswith("__count"):
            continue
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return dict(sorted(out.items()))


def timing_stats(stats: dict[str, Any]) -> dict[str, float]:
    """Wall-clock timings (seconds) of the step's phases, kept apart from the comparison."""
    return {
        k: float(v)
        for k, v in sorted(stats.items())
        if k.startswith(_TIMING_PREFIXES) and not k.endswith("__count")
    }


def inference_stats(stats: dict[str, Any]) -> dict[str, float]:
    """Statistics of the rollout side (rewards seen by the workflow, accepted...)."""
    return {
        k: float(v)
        for k, v in sorted(stats.items())
        if k.startswith(INFERENCE_PREFIXES) and not k.endswith("__count")
    }


def compare_values(recorded: float, replayed: float, rtol: float, atol: float) -> dict:
    both_nan = math.isnan(recorded) and math.isnan(replayed)
    identical = both_nan or recorded == replayed
    if identical:
        abs_diff = rel_diff = 0.0
    else:
        abs_diff = abs(replayed - recorded)
        rel_diff = abs_diff / abs(recorded) if recorded else math.inf
    within = identical or (abs_diff <= atol + rtol * abs(recorded))
    return {
        "recorded": recorded,
        "replayed": replayed,
        "abs_diff": abs_diff,
        "rel_diff": rel_diff,
        "identical": identical,
        "status": Verdict.IDENTICAL
        if identical
        else (Verdict.WITHIN_TOLERANCE if within else Verdict.DIVERGED),
    }


def _compare_metrics(
    recorded: dict[str, float], replayed: dict[str, float], rtol: float, atol: float
) -> dict[str, dict]:
    metrics = {}
    for name in sorted(set(recorded) | set(replayed)):
        if name not in replayed:
            metrics[name] = {"recorded": recorded[name], "status": Verdict.NOT_REPLAYED}
        elif name not in recorded:
            metrics[name] = {"replayed": replayed[name], "status": Verdict.NOT_RECORDED}
        else:
            metrics[name] = compare_values(recorded[name], replayed[name], rtol, atol)
    return metrics


def _step_status(metrics: dict[str, dict]) -> str:
    statuses = {
        m["status"]
        for name, m in metrics.items()
        if not (m["status"] == Verdict.NOT_RECORDED and name.startswith(OWN_PREFIX))
    }
    if Verdict.DIVERGED in statuses:
        return Verdict.DIVERGED
    if statuses <= {Verdict.IDENTICAL}:
        return Verdict.IDENTICAL
    if statuses <= {Verdict.IDENTICAL, Verdict.WITHIN_TOLERANCE}:
        return Verdict.WITHIN_TOLERANCE
    return Verdict.INCOMPLETE


class StatsComparison:
    """Accumulates per-step comparisons into a ReplayReport."""

    def __init__(
        self, recording: str, rtol: float, atol: float, topology: TopologyChange
    ):
        self.report = ReplayReport(recording, rtol, atol, topology)

    @property
    def steps(self) -> list[StepComparison]:
        return self.report.steps

    def add(
        self,
        step: int,
        recorded: dict[str, float] | None,
        replayed: dict[str, float],
        timings: dict[str, float] | None = None,
        stages: dict[str, dict] | None = None,
    ) -> StepComparison:
        """Compare one step; ``stages`` (from ``compare_stages``) joins the verdict:
        with zero tolerances a step whose stages differ (weights included) is not
        identical even when every committed statistic is."""
        if recorded is None:
            metrics = {
                k: {"replayed": v, "status": Verdict.NOT_RECORDED}
                for k, v in replayed.items()
            }
            entry = StepComparison(
                step, Verdict.NO_RECORDED_STATS, metrics, timings or {}
            )
        else:
            r = self.report
            metrics = _compare_metrics(recorded, replayed, r.rtol, r.atol)
            entry = StepComparison(step, _step_status(metrics), metrics, timings or {})
        entry.stages = dict(stages or {})
        bitwise = self.report.rtol == 0 and self.report.atol == 0
        if bitwise and first_divergent_stage(entry.stages) is not None:
            entry.status = Verdict.DIVERGED
        self.report.steps.append(entry)
        return entry

    def first_divergence(self) -> dict | None:
        return self.report.first_divergence()

    def summary_lines(self) -> list[str]:
        lines = [f"{'step':>6}  {'status':<16} {'metrics':>7}  {'max rel diff':>18}"]
        for e in self.steps:
            diffs = [m.get("rel_diff", 0.0) for m in e.metrics.values()]
            lines.append(
                f"{e.global_step:>6}  {e.status:<16} {len(e.metrics):>7}  "
                f"{_max_relative(diffs):>18}"
            )
        first = self.first_divergence()
        if self.report.topology.changed:
            lines.append(self.report.topology.describe())
        staged = self.report.first_stage_divergence()
        if staged is not None:
            entry = next(e for e in self.steps if e.global_step == staged["step"])
            below = (
                f"; below it, first at {staged['below']}" if "below" in staged else ""
            )
            lines.append(
                f"First divergent stage: {staged['stage']} at step {staged['step']} "
                f"({staged['where']}{below})."
            )
            if entry.stages:
                lines.append(describe(entry.global_step, entry.stages))
        elif self.steps and all(_all_stages_identical(e) for e in self.steps):
            names = ", ".join(
                stage
                for stage, r in self.steps[-1].stages.items()
                if r.get("status") != Verdict.ABSENT
            )
            lines.append(
                f"Every stage identical at every step ({names}): weights included."
            )
        if not self.steps:
            lines.append(
                "No step was replayed to its end, so none was compared"
                + (
                    ": the model is not the recorded one (above)."
                    if (self.report.model or {}).get("status") == Verdict.DIFFERS
                    else "."
                )
            )
        elif first is None and staged is None:
            lines.append(
                f"No divergence: {len(self.steps)} replayed steps match the recording."
            )
        if first is not None:
            lines.append(
                f"First divergence at step {first['global_step']}, metric {first['metric']}: "
                f"recorded {first['recorded']!r}, replayed {first['replayed']!r} "
                f"(rel diff {_relative(first['rel_diff'])}; {first['num_diverged_metrics']} metrics diverged at that step)."
            )
        return lines


def _max_relative(diffs: list[float]) -> str:
    """The largest relative difference of a step's metrics, over those recorded
    other than 0; those recorded 0 that moved are counted beside it (their
    relative difference is infinite, and a column of "recorded 0" said nothing)."""
    finite = [d for d in diffs if not math.isinf(d)]
    moved_from_0 = len(diffs) - len(finite)
    text = f"{max(finite):.3g}" if finite else "-"
    return text + (f" (+{moved_from_0} from 0)" if moved_from_0 else "")


def _relative(diff: float) -> str:
    """A relative difference as printed: where the recorded value is 0 there is
    none (the JSON keeps inf); the absolute difference says by how much."""
    return "recorded 0" if math.isinf(diff) else f"{diff:.3g}"


def _all_stages_identical(entry: StepComparison) -> bool:
    statuses = {r.get("status") for r in entry.stages.values()} - {Verdict.ABSENT}
    return statuses == {Verdict.IDENTICAL}
