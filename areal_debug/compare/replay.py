# SPDX-License-Identifier: Apache-2.0
"""What a replay compares with its recording at each step, and the report it keeps."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from areal_debug.compare.layers import PlaceOf, batch_places
from areal_debug.compare.report import REPORT_COPY_ENV, TopologyChange
from areal_debug.compare.stages import compare_model, compare_stages
from areal_debug.compare.statistics import StatsComparison, timing_stats, training_stats
from areal_debug.determinism import current_settings, differences
from areal_debug.logs import get_logger
from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.format import (
    REPLAY_STAGES_DIRNAME,
    RecordingError,
    step_dirname,
)
from areal_debug.recording.manifest import Layout
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.names import Verdict


class DivergenceStop(SystemExit):
    """debug.fail_on_divergence: the replay stops, its reason already logged once.
    A SystemExit (exit status 3), so that it ends the run without a traceback:
    the divergence is the finding, not a failure of the code."""

    EXIT_STATUS = 3

    def __init__(self):
        super().__init__(self.EXIT_STATUS)


# Where torchrun (torch.distributed.elastic) asks each of its processes to leave
# the reason it failed: its closing report shows it as the "Root Cause".
TORCHRUN_ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


def _stop(msg: str) -> None:
    reason = f"{msg} Stopping (debug.fail_on_divergence)."
    logger.error(reason)
    _tell_torchrun(reason)
    raise DivergenceStop()


def _tell_torchrun(reason: str) -> None:
    """Under torchrun, a process that exits non-zero is reported with a Python
    traceback of torchrun's own and, with no error file, "To enable traceback
    see ..." as its root cause: the file (torch's own JSON layout) makes the root
    cause the divergence, in one line."""
    path = os.environ.get(TORCHRUN_ERROR_FILE_ENV)
    if not path or os.path.exists(path):
        return  # not under torchrun, or a reason already there: keep the first
    text = f"{reason} (the finding of a replay, not an error of the code)"
    data = {
        "message": {
            "message": f"DivergenceStop: {text}",
            "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError as e:
        logger.warning(f"Could not leave torchrun the reason at {path}: {e}")


# The replay report's per-step timing of what the loop waited for recorded data.
REPLAY_WAIT = "replay/wait_for_data"

logger = get_logger("DebugReplay")


def topology_change(recorded: Layout, replay: Layout) -> TopologyChange:
    """The dump run's layout against the replay's."""
    return TopologyChange(
        recorded_mode=recorded.mode,
        replay_mode=replay.mode,
        recorded_heads=recorded.num_shards,
        replay_heads=replay.num_shards,
        recorded_train_dp=recorded.training_dp_size,
        replay_train_dp=replay.training_dp_size,
    )


def determinism_changes(manifest, workers: list[dict[str, Any]]) -> list[str]:
    """The determinism settings (this process's, the workers') that differ from
    the dump run's."""
    changed = differences(manifest.determinism, current_settings())
    if manifest.worker_determinism and workers:
        recorded = manifest.worker_determinism[0]
        changed += [f"workers' {c}" for c in differences(recorded, workers[0])]
    return changed


def read_replay_stages(report_path: str, step: int) -> dict[str, Any] | None:
    """A replay's own digests of ``step``, kept beside its report
    (``ReplayComparison._keep_stages``); None where there are none."""
    path = os.path.join(
        os.path.dirname(report_path),
        REPLAY_STAGES_DIRNAME,
        f"{step_dirname(step)}.json",
    )
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


class ReplayComparison:
    """Each step's statistics and stages against the recorded ones, written to the
    replay report as soon as the step is compared."""

    def __init__(
        self,
        reader: RecordingReader,
        debug,
        topology: TopologyChange,
        report_path: str,
        recorded_stages: Callable[[int], Any],
    ):
        self.reader = reader
        self.fail_on_divergence = debug.fail_on_divergence
        self.stats = StatsComparison(
            reader.path, debug.verify_rtol, debug.verify_atol, topology
        )
        self.report_path = report_path
        # The step's recorded stages, shared with the reference's stand-in.
        self._recorded_stages = recorded_stages
        self._stages: dict[int, dict[str, Any]] = {}

    @property
    def report(self):
        return self.stats.report

    def add_stages(
        self, step: int, stages, tensors, ref_forwards: int | None, ref_source: str
    ) -> None:
        """The step's stage digests (before its statistics, ``add_step``)."""
        recorded, recorded_tensors = self._recorded_stages(step)
        same_layout = not self.report.topology.changed
        compared = compare_stages(
            recorded,
            stages,
            same_layout,
            recorded_tensors,
            tensors,
            # The batch is read only where a layer differs (a lazy place_of).
            lambda *sample: self._places(step, recorded_tensors)(*sample),
        )
        if "ref_logp" in compared:
            # Whether the reference model ran, and how often: the evidence for
            # "recorded" (identical by construction) or "computed".
            compared["ref_logp"]["source"] = ref_source
            compared["ref_logp"]["reference_forwards"] = ref_forwards
        self._stages[step] = compared
        self._keep_stages(step, stages)

    def _places(self, step: int, recorded_tensors) -> PlaceOf:
        try:
            batch = self.reader.load_batch(step)
        except RecordingError:
            return lambda *sample: None  # named by the trainer's numbering only
        return batch_places(batch, recorded_tensors)

    def _keep_stages(self, step: int, stages) -> None:
        """The replay's own digests of the step beside its report (small: sums per
        tensor, not tensors), for comparing two replays with each other."""
        folder = os.path.join(os.path.dirname(self.report_path), REPLAY_STAGES_DIRNAME)
        os.makedirs(folder, exist_ok=True)
        atomic_write_json(os.path.join(folder, f"{step_dirname(step)}.json"), stages)

    def check_model(self, step: int, model: dict[str, list], actor_path: str) -> None:
        """The replay's weights as its first step starts against the recording's
        (``compare_model``): said plainly, kept in the report (written now),
        and with debug.fail_on_divergence a model that is not the recorded one
        stops the replay before the step trains."""
        result = compare_model(
            step,
            model,
            self._recorded_stages(step)[0],
            self.reader.recorded_stages(step - 1, tensors=False)[0]
            if step > 0
            else None,
        )
        result["actor_path"] = actor_path
        self.report.model = result
        self._write_report()
        status = result["status"]
        if status == Verdict.IDENTICAL:
            logger.info(
                f"Replay: the model is the recorded one ({result['against']}: "
                f"all {result['compared']} parameters identical)."
            )
            return
        if status != Verdict.DIFFERS:
            logger.info(f"Replay: the model is not checked: {result['reason']}.")
            return
        recorded_config = self.reader.manifest.config or {}
        recorded_path = (recorded_config.get("actor") or {}).get("path")
        msg = (
            f"Replay: the model is not the recorded one: the weights step {step} "
            f"starts from differ from {result['against']} in {result['differing']} "
            f"of {result['compared']} parameters, first {result['where']}. "
            f"actor.path is {actor_path}"
            + (f", the dump run's was {recorded_path}" if recorded_path else "")
            + "."
        )
        if self.fail_on_divergence:
            _stop(msg)
        logger.warning(msg)

    def add_step(self, step: int, stats: dict[str, Any], wait: float | None) -> None:
        """The step's statistics; the report is rewritten, a divergence reported."""
        recorded = self.reader.recorded_stats(step)
        if recorded is not None:
            recorded = training_stats(recorded)
        timings = timing_stats(stats)
        if wait is not None:
            # What prefetching leaves of reading the recording (step-time units).
            timings[REPLAY_WAIT] = wait
        entry = self.stats.add(
            step, recorded, training_stats(stats), timings, self._stages.pop(step, None)
        )
        self._write_report()
        if entry.status == Verdict.DIVERGED:
            self._diverged(step)

    def _write_report(self) -> None:
        data = self.report.to_json()
        atomic_write_json(self.report_path, data)
        # A copy where a tool running this replay asked (areal-debug bisect),
        # wherever the run's config puts its logs.
        copy = os.environ.get(REPORT_COPY_ENV)
        if copy:
            atomic_write_json(copy, data)

    def _diverged(self, step: int) -> None:
        first = self.report.first_stage_divergence()
        msg = (
            f"Replay step {step} diverged from the recording (first divergence: "
            f"step {first['step']}, stage {first['stage']}, at {first['where']}"
            + _recorded_replayed(first)
            + f"); report: {self.report_path}"
        )
        if self.fail_on_divergence:
            _stop(msg + ".")
        # A what-if replay diverges because the user asked it to: said, not warned.
        (logger.info if self.report.config_changes else logger.warning)(msg)

    def one_level_down(self) -> str | None:
        return one_level_down(self.report, self.report_path)

    def summary_lines(self) -> list[str]:
        return self.stats.summary_lines()

    def reference_forwards(self) -> int:
        """The reference model's forward passes over every compared step."""
        forwards = [
            e.stages.get("ref_logp", {}).get("reference_forwards")
            for e in self.report.steps
        ]
        return sum(f or 0 for f in forwards)


def _recorded_replayed(first: dict[str, Any]) -> str:
    if "recorded" in first and "replayed" in first:
        return f", recorded {first['recorded']!r}, replayed {first['replayed']!r}"
    return ""


def one_level_down(report, report_path: str) -> str | None:
    """Where ``report``'s first divergence is the log-probs and no layer tells where
    in the model it starts because the recording (or this replay) has no layer
    digests of that step: the exact way one level down (issue 59's recipe, two
    replays and their diff); None otherwise."""
    first = report.first_stage_divergence()
    if not first or first.get("stage") != "logp" or first.get("below"):
        return None
    layers = first.get("layers") or {}
    step = first["step"]
    if layers.get("status") not in (None, Verdict.NOT_COMPARED):
        return None
    this_run = os.path.dirname(report_path)
    other = f"{os.path.basename(this_run)}_as_recorded"
    also = (
        ""
        if layers.get("reason", "").startswith("the recording has")
        else f", this one again with debug.layer_digests={step}"
    )
    return (
        f"no layer digests of step {step} in the recording: to find the layer "
        f"where the log-probs start to differ, replay it as recorded (without your "
        f"changes) with debug.layer_digests={step} "
        f"debug.replay_trial_name={other}{also}, then `areal-debug diff "
        f"{os.path.join(os.path.dirname(this_run), other)} {this_run}`"
    )
