# SPDX-License-Identifier: Apache-2.0
"""One trial of a bisect: the user's replay command, step N and nothing more,
with some settings changed or another AReaL in front, and what it says of step N.

The replay is the oracle: a recorded step replays bit for bit or it does not, so
a trial is never noise. Each trial replays the fewest steps it can
(``debug.replay_start_step=N debug.replay_end_step=N``: from the latest recover
checkpoint kept before N, else from step 0) into a trial of its own, and hands
its report to the bisect through ``AREAL_DEBUG_REPORT_COPY`` (the replay writes a
copy there), wherever the command's config puts its logs.
"""

from __future__ import annotations

import enum
import json
import os
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from areal_debug.compare.report import REPORT_COPY_ENV, ReplayReport
from areal_debug.stages.names import Verdict


class Outcome(str, enum.Enum):
    """What a trial says of step N (``git bisect run``'s exit statuses)."""

    SAME = "same"  # 0: bit for bit the recording's
    MOVED = "moved"  # 1: leaves the recording at step N
    SKIP = "skip"  # 125: could not say (the AReaL tried does not import)

    @property
    def exit_status(self) -> int:
        return {Outcome.SAME: 0, Outcome.MOVED: 1, Outcome.SKIP: 125}[self]


@dataclass
class TrialResult:
    """One trial: what it changed, what it found and where, and its log."""

    label: str
    outcome: Outcome
    changes: list[str] = field(default_factory=list)
    first_stage: str | None = None
    where: str | None = None
    why: str = ""
    seconds: float = 0.0
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        return out

    def line(self) -> str:
        said = {
            Outcome.SAME: "bit for bit",
            Outcome.MOVED: f"MOVED, first at {self.first_stage}"
            + (f" ({self.where})" if self.where else ""),
            Outcome.SKIP: f"skipped: {self.why}",
        }[self.outcome]
        return f"{self.label}: {said} ({self.seconds:.0f} s)"


class BisectError(RuntimeError):
    """A bisect that cannot go on, with what to do."""


def as_override(setting: str) -> str:
    """``K=V`` as an override that sets K whether or not the run's YAML has it
    (Hydra's ``++``; AReaL composes the YAML, where a key it lacks needs it)."""
    return setting if setting.startswith(("+", "~")) else f"++{setting}"


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in label)[:60]


@dataclass
class TrialRunner:
    """Runs the user's replay command for step ``step`` as trials, each into a
    replay trial of its own (``bisect-<token>-<k>``), logs under ``logs``."""

    command: list[str]
    step: int
    logs: str
    # Each bisect's trials apart from another's in the same experiment.
    trial_prefix: str = field(default_factory=lambda: f"bisect-{os.urandom(3).hex()}")
    timeout: float | None = None
    count: int = 0

    def run(
        self,
        label: str,
        overrides: list[str],
        env: dict[str, str] | None = None,
    ) -> TrialResult:
        self.count += 1
        name = f"{self.trial_prefix}-{self.count}"
        os.makedirs(self.logs, exist_ok=True)
        base = os.path.join(self.logs, f"{self.count:02d}-{_safe(label)}")
        report_path, log_path = base + ".report.json", base + ".log"
        argv = [
            *self.command,
            f"debug.replay_start_step={self.step}",
            f"debug.replay_end_step={self.step}",
            f"debug.replay_trial_name={name}",
            *map(as_override, overrides),
        ]
        full_env = {**os.environ, **(env or {}), REPORT_COPY_ENV: report_path}
        t0 = time.monotonic()
        with open(log_path, "w") as log:
            log.write(f"$ {shlex.join(argv)}\n")
            log.flush()
            done = subprocess.run(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                timeout=self.timeout,
            )
        seconds = time.monotonic() - t0
        if not os.path.exists(report_path):
            raise BisectError(
                f"The replay of trial {label!r} ended with status {done.returncode} "
                f"and wrote no report: its log is {log_path}. A bisect needs the "
                "replay command to run as is; try it alone first."
            )
        return self._verdict(label, overrides, report_path, log_path, seconds)

    def _verdict(self, label, changes, report_path, log_path, seconds) -> TrialResult:
        with open(report_path) as f:
            report = ReplayReport.from_json(json.load(f))
        entry = next((e for e in report.steps if e.global_step == self.step), None)
        if entry is None:
            raise BisectError(
                f"Trial {label!r} did not replay step {self.step} to its end (its "
                f"log: {log_path})."
            )
        result = TrialResult(label, Outcome.SAME, list(changes), seconds=seconds)
        result.log = log_path
        first = entry.first_stage()
        if entry.status not in (Verdict.IDENTICAL, Verdict.DIVERGED) and first is None:
            raise BisectError(
                f"Trial {label!r} cannot compare step {self.step} with the recording "
                f"({entry.status}): a bisect needs its statistics or stage digests "
                f"(areal-debug inspect shows what the step holds). Log: {log_path}"
            )
        if entry.status != Verdict.IDENTICAL:
            result.outcome = Outcome.MOVED
            first = first or {}
            result.first_stage = first.get("stage", "stats")
            below = first.get("below")
            result.where = (
                f"{first.get('where')}; below it, first at {below}"
                if below
                else first.get("where") or first.get("metric")
            )
        return result
