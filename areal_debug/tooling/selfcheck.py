# SPDX-License-Identifier: Apache-2.0
"""``areal-debug selfcheck``: does this machine and configuration repeat a replay?

The same replay command runs twice, each as a trial of its own (nothing is
overwritten), and each step's stages are compared between the two replays (their
own digests, kept beside each report) and with the recording (each report's
verdicts). Three answers, per step:

- repeatable here, and the recording's: both replays agree with each other and
  with the recording;
- repeatable here, but not the recording's: the two agree with each other, not with
  the recording (the code, versions, hardware or config differ from the dump run's:
  the first stage says where);
- not repeatable here: the two replays differ from each other, at a stage (the
  first parameter, trajectory or mini-batch): a nondeterministic kernel, a
  collective, or a setting of this machine, not the recording.

Peers check repeatability as a gate the same way (verl #7027: "the first divergence
happens in actor update"; Megatron-LM #5785: fixed-environment repeatability).
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from areal_debug.compare.replay import read_replay_stages
from areal_debug.compare.report import ReplayReport, StepComparison, read_report
from areal_debug.compare.stages import first_between, first_place
from areal_debug.recording.format import (
    REPLAY_REPORT_NAME,
)
from areal_debug.stages.names import Verdict
from areal_debug.testing import end_process

TRIALS = ("a", "b")
REPEATS_THE_RECORDING = "repeatable here, and the recording's"
REPEATS_NOT_THE_RECORDING = "repeatable here, but not the recording's"
NOT_REPEATABLE = "not repeatable here"


class SelfcheckError(RuntimeError):
    pass


@dataclass
class Trial:
    name: str
    log: str
    returncode: int | None = None
    report_path: str | None = None
    report: ReplayReport | None = None

    def steps(self) -> dict[int, StepComparison]:
        entries = self.report.steps if self.report is not None else []
        return {e.global_step: e for e in entries}

    def stages(self, step: int) -> dict[str, Any] | None:
        if self.report_path is None:
            return None
        return read_replay_stages(self.report_path, step)


@dataclass
class StepVerdict:
    step: int
    verdict: str  # one of the three answers
    # Between the two replays: the first stage that differs, and where.
    between: dict[str, Any] | None = None
    # Against the recording (trial a's report): the first stage that differs.
    recording: dict[str, Any] | None = None
    stages_compared: int = 0
    metrics_compared: int = 0

    @property
    def repeatable(self) -> bool:
        return self.verdict != NOT_REPEATABLE

    def describe(self) -> str:
        if self.verdict == NOT_REPEATABLE:
            b = self.between or {}
            return (
                f"step {self.step}: {b.get('stage', '?')} not repeatable here (first: "
                f"{first_place(b)})"
            )
        text = f"step {self.step}: {self.verdict}"
        if self.verdict == REPEATS_NOT_THE_RECORDING and self.recording:
            r = self.recording
            text += f" (first: {r.get('stage')} at {first_place(r)})"
        return (
            f"{text}; {self.stages_compared} stage(s) and "
            f"{self.metrics_compared} statistics compared between the two replays"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "verdict": self.verdict,
            "repeatable": self.repeatable,
            "between_replays": self.between,
            "against_recording": self.recording,
            "stages_compared": self.stages_compared,
            "metrics_compared": self.metrics_compared,
        }


@dataclass
class SelfcheckResult:
    command: list[str]
    logs_dir: str
    trials: list[Trial]
    steps: list[StepVerdict] = field(default_factory=list)

    @property
    def repeatable(self) -> bool:
        return bool(self.steps) and all(s.repeatable for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "logs": self.logs_dir,
            "trials": {
                t.name: {"returncode": t.returncode, "report": t.report_path}
                for t in self.trials
            },
            "repeatable": self.repeatable,
            "steps": [s.to_json() for s in self.steps],
        }


def step_overrides(steps: str | None) -> list[str]:
    """``N`` or ``A-B`` as the replay's start and end step overrides."""
    if not steps:
        return []
    first, _, last = steps.partition("-")
    try:
        a, b = int(first), int(last or first)
    except ValueError:
        raise SelfcheckError(
            f"--steps {steps!r} is not a step or a range: give N or A-B (e.g. 0-2)."
        ) from None
    if b < a:
        raise SelfcheckError(f"--steps {steps!r} ends before it starts.")
    return ([f"debug.replay_start_step={a}"] if a > 0 else []) + [
        f"debug.replay_end_step={b}"
    ]


def run_trial(
    command: list[str], trial: Trial, env: dict[str, str], timeout: float
) -> None:
    """The replay command once, as ``trial``: its output to the trial's log, every
    process it started ended."""
    cmd = [*command, f"debug.replay_trial_name={trial.name}"]
    with open(trial.log, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            trial.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            trial.returncode = None
        finally:
            end_process(proc)


def find_report(fileroot: str, experiment: str, trial: str) -> str | None:
    """The trial's replay report under AReaL's log directory
    (``FILEROOT/logs/USER/EXPERIMENT/TRIAL``)."""
    found = glob.glob(
        os.path.join(
            glob.escape(fileroot),
            "logs",
            "*",
            glob.escape(experiment),
            glob.escape(trial),
            REPLAY_REPORT_NAME,
        )
    )
    return found[0] if len(found) == 1 else None


def compare_trials(a: Trial, b: Trial) -> list[StepVerdict]:
    """Each step both replays ran: the two against each other, stage by stage
    and statistic by statistic, then trial a against the recording."""
    a_steps, b_steps = a.steps(), b.steps()
    out = []
    for step in sorted(set(a_steps) & set(b_steps)):
        ea, eb = a_steps[step], b_steps[step]
        verdict = StepVerdict(step, REPEATS_THE_RECORDING)
        sa, sb = a.stages(step), b.stages(step)
        if sa is not None and sb is not None:
            verdict.stages_compared, verdict.between = first_between(sa, sb)
        # The statistics are counted either way; they name the difference only
        # where no stage does (digests off).
        first_statistic = _metrics_between(ea, eb, verdict)
        verdict.between = verdict.between or first_statistic
        if verdict.between is not None:
            verdict.verdict = NOT_REPEATABLE
        elif ea.status != Verdict.IDENTICAL or eb.status != Verdict.IDENTICAL:
            verdict.verdict = REPEATS_NOT_THE_RECORDING
            verdict.recording = ea.first_stage() or {"stage": ea.status, "where": "?"}
        out.append(verdict)
    return out


def _metrics_between(
    ea: StepComparison, eb: StepComparison, verdict: StepVerdict
) -> dict[str, Any] | None:
    """The first statistic (by name) whose replayed value differs between the two
    replays; counts what was compared."""
    first = None
    for name in sorted(set(ea.metrics) & set(eb.metrics)):
        va, vb = ea.metrics[name].get("replayed"), eb.metrics[name].get("replayed")
        if va is None and vb is None:
            continue
        verdict.metrics_compared += 1
        if first is None and va != vb and not (_nan(va) and _nan(vb)):
            first = {"stage": "stats", "where": name, "a": va, "b": vb}
    return first


def _nan(v) -> bool:
    return isinstance(v, float) and v != v


def run_selfcheck(
    command: list[str],
    fileroot: str,
    experiment: str,
    base_trial: str,
    steps: str | None = None,
    logs_dir: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
) -> SelfcheckResult:
    """Run ``command`` (a replay) twice as trials ``BASE_selfcheck-STAMP-a``/``-b``
    and compare them."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs_dir = logs_dir or os.path.abspath(f"selfcheck-{stamp}")
    os.makedirs(logs_dir, exist_ok=True)
    command = [*command, *step_overrides(steps)]
    env = {**os.environ, **(env or {})}
    result = SelfcheckResult(command, logs_dir, [])
    for suffix in TRIALS:
        trial = Trial(
            f"{base_trial}_selfcheck-{stamp}-{suffix}",
            os.path.join(logs_dir, f"replay-{suffix}.log"),
        )
        result.trials.append(trial)
        run_trial(command, trial, env, timeout)
        trial.report_path = find_report(fileroot, experiment, trial.name)
        if trial.report_path is None:
            raise SelfcheckError(
                f"Replay {suffix} ({trial.name}) wrote no replay report (exit "
                f"{trial.returncode}); its log is {trial.log}. Run the command alone "
                "first (areal-debug doctor checks it), then selfcheck it."
            )
        trial.report = read_report(trial.report_path)
    result.steps = compare_trials(*result.trials)
    if not result.steps:
        raise SelfcheckError(
            f"The two replays share no compared step; their logs are in {logs_dir}."
        )
    return result
