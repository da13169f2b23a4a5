# SPDX-License-Identifier: Apache-2.0
"""What a replay writes to ``replay_report.json``: typed, with JSON in and out."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from areal_debug.compare.config_changes import is_one_sided
from areal_debug.recording.format import REPLAY_REPORT_NAME, RecordingError
from areal_debug.stages import train_infer
from areal_debug.stages.names import Verdict, step_order

# Statistics areal-debug itself adds to a step (stages/mismatch.py): a recording
# made before a version measured them lacks them, which leaves its steps complete.
OWN_PREFIX = "areal_debug/"
# How many names a headline lists before "and N more".
LISTED = 4


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def one_sided(change: dict[str, Any]) -> bool:
    """``ConfigChange.one_sided`` of a change as the report keeps it (``to_json``)."""
    return is_one_sided(change.get("recorded"), change.get("replay"))


REPORT_NAME = REPLAY_REPORT_NAME
# Where a replay also writes its report, when set (areal-debug bisect's channel).
REPORT_COPY_ENV = "AREAL_DEBUG_REPORT_COPY"


@dataclass
class TopologyChange:
    """The dump run's layout against the replay's: mode, shards per step, train DP."""

    recorded_mode: str
    replay_mode: str
    recorded_heads: int
    replay_heads: int
    recorded_train_dp: int
    replay_train_dp: int

    @property
    def changed(self) -> bool:
        return (
            self.recorded_mode != self.replay_mode
            or self.recorded_heads != self.replay_heads
            or self.recorded_train_dp != self.replay_train_dp
        )

    def describe(self) -> str:
        """One line saying how the replay's layout differs from the dump run's."""
        return (
            f"Topology changed: recorded in {self.recorded_mode} mode "
            f"({self.recorded_heads} shard(s) per step, training data-parallel size "
            f"{self.recorded_train_dp}), replayed in {self.replay_mode} mode "
            f"({self.replay_heads} shard(s), data-parallel size "
            f"{self.replay_train_dp}); each step's batch is re-split and ordered for "
            "the new layout, so statistics may differ from the recording."
        )

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "changed": self.changed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopologyChange:
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{k: data[k] for k in names})


@dataclass
class StepComparison:
    """One replayed step: per-metric comparison with the recording."""

    global_step: int
    status: str
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # Stage by stage (compare.stages.compare_stages), keyed by stage.
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepComparison:
        return cls(
            global_step=int(data["global_step"]),
            status=str(data["status"]),
            metrics=dict(data.get("metrics", {})),
            timings=dict(data.get("timings", {})),
            stages=dict(data.get("stages", {})),
        )

    def within_tolerance(self) -> bool:
        """Whether a metric both sides have differs, within the tolerance."""
        return any(
            m.get("status") == Verdict.WITHIN_TOLERANCE for m in self.metrics.values()
        )

    def first_stage(self) -> dict[str, Any] | None:
        """The earliest stage that differs, and where (the update mini-batch by
        mini-batch, ``step_order``); the committed statistics (``stats``) when no
        digested stage does but a metric diverged."""
        for stage in step_order(self.stages):  # whatever order the JSON keys came in
            result = self.stages[stage]
            if result.get("status") == Verdict.DIFFERS:
                return {"step": self.global_step, "stage": stage, **result}
        worst = self.worst_metric()
        if worst is None:
            return None
        name, m, _ = worst
        return {"step": self.global_step, "stage": "stats", "where": name, **m}

    def worst_metric(
        self, prefer: tuple[str, ...] = ()
    ) -> tuple[str, dict[str, Any], int] | None:
        """The diverged metric with the largest relative difference, its entry and
        how many metrics diverged; None when none did. A diverged metric named
        like one of ``prefer`` (the leaf of a setting the user changed: ``lr`` for
        ``actor.optimizer.lr``) comes first: a statistic recorded near 0 (a KL)
        has the largest relative difference of a what-if replay but says less."""
        diverged = {
            k: m for k, m in self.metrics.items() if m.get("status") == Verdict.DIVERGED
        }
        if not diverged:
            return None
        named = {k: m for k, m in diverged.items() if k.rsplit("/", 1)[-1] in prefer}
        name, m = max((named or diverged).items(), key=lambda kv: kv[1]["rel_diff"])
        return name, m, len(diverged)


def not_compared(recorded: list[dict[str, Any]], replaying: list[Any]) -> list[str]:
    """``capability (why)`` for each seam the dump run's AReaL lacked (its
    manifest's ``missing_seams``) or the replay's lacks (``MissingSeam``s),
    once each."""
    found: dict[str, str] = {}
    for run, missing in (
        ("the dump run's AReaL", recorded),
        ("this AReaL", [m.to_json() for m in replaying]),
    ):
        for m in missing:
            capability = str(m.get("capability", "?")).split(" (")[0]
            found.setdefault(capability, f"{m.get('problem', '?')} in {run}")
    return [f"{capability} ({why})" for capability, why in found.items()]


@dataclass
class ReplayReport:
    recording: str
    rtol: float
    atol: float
    topology: TopologyChange
    steps: list[StepComparison] = field(default_factory=list)
    # How the replaying AReaL differs from the recording's (None: the same).
    areal_change: str | None = None
    # The training settings changed from the recording's (ConfigChange.to_json);
    # None where they were not compared (a recording without its config).
    config_changes: list[dict[str, Any]] | None = None
    # The weights the replay's first step started from against the recording's
    # (compare.stages.compare_model, with actor_path); None: not checked.
    model: dict[str, Any] | None = None
    # What neither run could see, each "capability (why)": a seam the dump's or
    # the replay's AReaL lacked (areal_compat.seams). No verdict covers these.
    not_compared: list[str] = field(default_factory=list)

    def headline(self) -> str:
        """One line: how the replay went, and what was changed that can explain it."""
        steps = self.steps
        diverged = [e for e in steps if e.status == Verdict.DIVERGED]
        only_recorded, only_replayed = self.one_sided_metrics()
        if not steps:
            text = "no step compared"
        elif not diverged:
            # A step is bitwise where every metric both sides have is: a statistic
            # only one side logs (another AReaL build's) is not compared, not moved.
            same = sum(not e.within_tolerance() for e in steps)
            text = (
                f"identical to the recording at every step ({len(steps)})"
                if same == len(steps)
                else f"within tolerance at every step ({same} of {len(steps)} bitwise)"
            )
            if self.not_compared or only_recorded or only_replayed:
                text += " in what was compared"
        else:
            staged, first = self.first_stage_divergence(), self.first_divergence()
            if staged:
                where = f" ({staged['where']})" if staged.get("where") else ""
                if staged.get("below"):
                    # The layer under the stage: where in the model it starts.
                    where = f" (first at {staged['below']})"
                text = f"left the recording at step {staged['step']}: {staged['stage']}{where}"
            else:
                text = (
                    f"left the recording at step {first['global_step']}: "
                    f"metric {first['metric']}"
                )
        model = self.model or {}
        if model.get("status") == Verdict.DIFFERS:
            not_recorded = (
                f"the model is not the recorded one ({model['differing']} of "
                f"{model['compared']} parameters differ, first {model['where']})"
            )
            staged = self.first_stage_divergence() or {}
            # Its first divergent stage is the model itself: said once.
            text = (
                not_recorded
                if staged.get("stage") == "model" or not steps
                else f"{not_recorded}; {text}"
            )
        changed = [c["key"] for c in self.config_changes or () if not one_sided(c)]
        if changed:
            text += "; you changed " + ", ".join(changed)
        if self.areal_change:
            text += f"; {self.areal_change}"
        only = [c["key"] for c in self.config_changes or () if one_sided(c)]
        if only:
            text += "; settings only one side has: " + ", ".join(only)
        if only_recorded:
            text += f"; statistics only the recording has: {_names(only_recorded)}"
        if only_replayed:
            text += f"; statistics only the replay logs: {_names(only_replayed)}"
        if self.not_compared:
            text += "; NOT compared: " + "; ".join(self.not_compared)
        return text

    def one_sided_metrics(self) -> tuple[list[str], list[str]]:
        """The statistics only the recording has (``NOT_REPLAYED``) and only the
        replay logged (``NOT_RECORDED``, areal-debug's own left out: an older
        recording lacks them), over every step."""
        recorded, replayed = set(), set()
        for entry in self.steps:
            for name, m in entry.metrics.items():
                if m.get("status") == Verdict.NOT_REPLAYED:
                    recorded.add(name)
                elif m.get("status") == Verdict.NOT_RECORDED and not (
                    name.startswith(OWN_PREFIX)
                ):
                    replayed.add(name)
        return sorted(recorded), sorted(replayed)

    def first_divergence(self) -> dict[str, Any] | None:
        """The step and metric that diverged first (a changed setting's own
        statistic, else the largest relative difference)."""
        # The settings the user changed, by their leaf name.
        prefer = tuple(
            c["key"].rsplit(".", 1)[-1]
            for c in self.config_changes or ()
            if not one_sided(c)
        )
        for entry in self.steps:
            worst = entry.worst_metric(prefer)
            if worst is not None:
                name, m, count = worst
                return {
                    "global_step": entry.global_step,
                    "metric": name,
                    **m,
                    "num_diverged_metrics": count,
                }
        return None

    def first_stage_divergence(self) -> dict[str, Any] | None:
        """``{"step", "stage", "where", ...}`` of the first step that diverged."""
        for entry in self.steps:
            if entry.status == Verdict.DIVERGED:
                return entry.first_stage()
        return None

    def to_json(self) -> dict[str, Any]:
        steps = self.steps
        return {
            "recording": self.recording,
            "tolerance": {"rtol": self.rtol, "atol": self.atol},
            "topology": self.topology.to_json(),
            "summary": {
                "steps": len(steps),
                "identical_steps": sum(e.status == Verdict.IDENTICAL for e in steps),
                "all_identical": bool(steps)
                and all(e.status == Verdict.IDENTICAL for e in steps),
                "not_compared": self.not_compared,
                "first_divergence": self.first_divergence(),
                "train_infer": self.train_infer(),
            },
            "first_divergence": self.first_stage_divergence(),
            "areal_change": self.areal_change,
            "config_changes": self.config_changes,
            "model": self.model,
            "headline": self.headline(),
            "steps": [e.to_json() for e in steps],
        }

    def train_infer(self) -> str | None:
        """AReaL's own ``ppo_actor/train_infer`` statistics (#1736) beside ours on
        the replayed steps, in one line; None where no step has AReaL's. Each is
        also compared with the recording as a metric of its step."""
        return train_infer.summary_of_stats(self.series("replayed"))

    def series(self, which: str) -> dict[int, dict[str, float]]:
        """{step: {metric: value}} of the ``recorded`` or ``replayed`` values."""
        out: dict[int, dict[str, float]] = {}
        for entry in self.steps:
            out[entry.global_step] = {
                name: float(m[which])
                for name, m in entry.metrics.items()
                if m.get(which) is not None
            }
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplayReport:
        return cls(
            recording=data["recording"],
            rtol=float(data["tolerance"]["rtol"]),
            atol=float(data["tolerance"]["atol"]),
            topology=TopologyChange.from_json(data["topology"]),
            steps=[StepComparison.from_json(e) for e in data.get("steps", [])],
            areal_change=data.get("areal_change"),
            config_changes=data.get("config_changes"),
            model=data.get("model"),
            not_compared=list(data.get("summary", {}).get("not_compared") or []),
        )


class NotAReport(ValueError):
    """A JSON file that is not a replay report areal-debug can read."""


def read_report(path: str) -> ReplayReport:
    """The replay report at ``path``: the one way every command, the page, the
    demo and selfcheck read one. RecordingError where the file cannot be read,
    NotAReport where it is not a report (or one this areal-debug cannot read)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise RecordingError(f"Cannot read the replay report {path}: {e}.") from e
    if not isinstance(data, dict) or "steps" not in data or "recording" not in data:
        raise NotAReport(
            f"{path} is not a replay report (no 'recording' and 'steps' keys). Give "
            f"the {REPORT_NAME} a replay wrote into its log directory."
        )
    try:
        return ReplayReport.from_json(data)
    except (KeyError, TypeError, ValueError) as e:
        raise NotAReport(
            f"{path} is a replay report this areal-debug cannot read (missing or "
            f"malformed {e}): written by another version? Replay again to write "
            "one of this version."
        ) from None
