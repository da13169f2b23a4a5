# SPDX-License-Identifier: Apache-2.0
"""Compare a replay's statistics with those recorded by the dump run."""

from __future__ import annotations

import math
from typing import Any

REPORT_NAME = "replay_report.json"

# Wall-clock timings differ between any two runs; they are not training results.
_TIMING_PREFIXES = ("timeperf/",)
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
        "status": "identical"
        if identical
        else ("within_tolerance" if within else "diverged"),
    }


class ReplayVerifier:
    """Accumulates per-step comparisons and builds the replay report."""

    def __init__(self, recording: str, rtol: float, atol: float, topology: dict):
        self.recording = recording
        self.rtol = rtol
        self.atol = atol
        self.topology = topology
        self.steps: list[dict[str, Any]] = []

    def add(
        self,
        step: int,
        recorded: dict[str, float] | None,
        replayed: dict[str, float],
        timings: dict[str, float] | None = None,
    ) -> dict:
        entry: dict[str, Any] = {
            "global_step": step,
            "metrics": {},
            "timings": timings or {},
        }
        if recorded is None:
            entry["status"] = "no_recorded_stats"
            entry["metrics"] = {
                k: {"replayed": v, "status": "not_recorded"}
                for k, v in replayed.items()
            }
            self.steps.append(entry)
            return entry
        for name in sorted(set(recorded) | set(replayed)):
            if name not in replayed:
                entry["metrics"][name] = {
                    "recorded": recorded[name],
                    "status": "not_replayed",
                }
            elif name not in recorded:
                entry["metrics"][name] = {
                    "replayed": replayed[name],
                    "status": "not_recorded",
                }
            else:
                entry["metrics"][name] = compare_values(
                    recorded[name], replayed[name], self.rtol, self.atol
                )
        statuses = {m["status"] for m in entry["metrics"].values()}
        entry["status"] = (
            "diverged"
            if "diverged" in statuses
            else (
                "identical"
                if statuses <= {"identical"}
                else "within_tolerance"
                if statuses <= {"identical", "within_tolerance"}
                else "incomplete"
            )
        )
        self.steps.append(entry)
        return entry

    def first_divergence(self) -> dict | None:
        for entry in self.steps:
            diverged = {
                k: m for k, m in entry["metrics"].items() if m["status"] == "diverged"
            }
            if diverged:
                name, m = max(diverged.items(), key=lambda kv: kv[1]["rel_diff"])
                return {
                    "global_step": entry["global_step"],
                    "metric": name,
                    **m,
                    "num_diverged_metrics": len(diverged),
                }
        return None

    def report(self) -> dict[str, Any]:
        return {
            "recording": self.recording,
            "tolerance": {"rtol": self.rtol, "atol": self.atol},
            "topology": self.topology,
            "summary": {
                "steps": len(self.steps),
                "identical_steps": sum(e["status"] == "identical" for e in self.steps),
                "all_identical": bool(self.steps)
                and all(e["status"] == "identical" for e in self.steps),
                "first_divergence": self.first_divergence(),
            },
            "steps": self.steps,
        }

    def summary_lines(self) -> list[str]:
        lines = [f"{'step':>6}  {'status':<16} {'metrics':>7}  {'max rel diff':>12}"]
        for e in self.steps:
            diffs = [m.get("rel_diff", 0.0) for m in e["metrics"].values()]
            lines.append(
                f"{e['global_step']:>6}  {e['status']:<16} {len(e['metrics']):>7}  "
                f"{max(diffs, default=0.0):>12.3g}"
            )
        first = self.first_divergence()
        if self.topology.get("changed"):
            lines.append(describe_topology_change(self.topology))
        if first is None:
            lines.append(
                f"No divergence: {len(self.steps)} replayed steps match the recording."
            )
        else:
            lines.append(
                f"First divergence at step {first['global_step']}, metric {first['metric']}: "
                f"recorded {first['recorded']!r}, replayed {first['replayed']!r} "
                f"(rel diff {first['rel_diff']:.3g}; {first['num_diverged_metrics']} metrics diverged at that step)."
            )
        return lines


def describe_topology_change(topology: dict) -> str:
    """One line saying how the replay's layout differs from the dump run's."""
    return (
        "Topology changed: recorded in {recorded_mode} mode ({recorded_heads} "
        "shard(s) per step, training data-parallel size {recorded_train_dp}), "
        "replayed in {replay_mode} mode ({replay_heads} shard(s), data-parallel "
        "size {replay_train_dp}); each step's batch is re-split and ordered for "
        "the new layout, so statistics may differ from the recording."
    ).format(**topology)
