# SPDX-License-Identifier: Apache-2.0
"""Dump mode: record what the inference side produced, each step, in the background."""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Callable
from contextlib import nullcontext
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as pkg_version
from typing import Any

import torch

from areal_debug import areal_compat
from areal_debug.compare.config_changes import config_dict
from areal_debug.compare.coverage import coverage
from areal_debug.compare.statistics import (
    inference_stats,
    timing_stats,
    training_stats,
)
from areal_debug.determinism import current_settings
from areal_debug.logs import get_logger
from areal_debug.modes.base import ActiveMode
from areal_debug.modes.engines import RolloutFailures
from areal_debug.modes.sglang_stand_in import missing_sglang_error, relax_sglang_check
from areal_debug.recording import checkpoints
from areal_debug.recording.anomaly import AnomalyDetector
from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.format import FORMAT_VERSION, MANIFEST, RecordingError
from areal_debug.recording.lock import RecordingLock
from areal_debug.recording.manifest import Manifest
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.retention import RetentionPolicy
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import (
    supersede_steps,
    sweep_leftovers,
    write_manifest,
)
from areal_debug.version import areal_debug_version

logger = get_logger("DebugDump")


def evaluates(config) -> bool:
    """Whether the run's evaluator ever fires (any of its frequencies set)."""
    evaluator = getattr(config, "evaluator", None)
    return evaluator is not None and any(
        getattr(evaluator, f, None) is not None
        for f in ("freq_epochs", "freq_steps", "freq_secs")
    )


class DumpMode(ActiveMode):
    name = "dump"

    def __init__(self, trainer, debug, topology):
        super().__init__(trainer, debug, topology)
        self.writer: RecordingWriter | None = None
        self.lock: RecordingLock | None = None
        self._sglang_guard = None
        self.records_teacher = False
        self.policy = RetentionPolicy.from_debug(debug)
        self.detector = (
            AnomalyDetector(debug.anomaly_median_factor, debug.anomaly_thresholds)
            if debug.pin_on_anomaly
            else None
        )
        # A rollout request the engine fails on is an anomaly of the step whose
        # batch was being prepared (the clock advances after it is ready).
        self.failures = RolloutFailures(lambda: self.clock.preparing)

    # -- building ------------------------------------------------------------------
    def build_inference_engine(self, default: Callable, rollout_config, is_eval, lora):
        if (
            is_eval
            and self.topology.eval_engine_is_a_worker
            and not evaluates(self.trainer.config)
        ):
            # AReaL starts it whether or not anything evaluates, and copes with
            # none (its online mode has none): a process that would only idle.
            logger.info(
                "Dump: evaluation is off (evaluator.freq_epochs, freq_steps and "
                "freq_secs unset): AReaL's eval-rollout worker is not started."
            )
            return None
        if self._sglang_guard is None:
            self._sglang_guard = relax_sglang_check()
        if is_eval:
            return self._build_engine(default, rollout_config, is_eval, lora)
        # The rollout workers (single-controller) note the requests they fail on,
        # for a dump that pins: asked at every step's end, one RPC per worker.
        watching = self.topology.building_rollout() if self.detector else nullcontext()
        with watching:
            engine = self.topology.attach_rollout(self.trainer, rollout_config)
            if engine is None:
                engine = self._build_engine(default, rollout_config, is_eval, lora)
        return self.topology.record_engine(
            engine, self._record_batch, self.patches, self.failures
        )

    def _build_engine(self, default: Callable, rollout_config, is_eval, lora):
        try:
            return default(rollout_config, is_eval, lora)
        except PackageNotFoundError as e:
            if e.name != "sglang":
                raise
            raise missing_sglang_error() from e

    def build_teacher_engine(self, default: Callable, rollout_config):
        engine = self.topology.attach_teacher(self.trainer, rollout_config)
        if engine is None:
            engine = default(rollout_config)
        if not self.topology.records_teacher:
            logger.warning(
                "The teacher's log-probs are not recorded in SPMD mode (each process "
                "scores its own part of the batch); a replay of this recording "
                "would need the teacher's servers and is refused. Record in "
                "single-controller mode (scheduler.type=local) to replay "
                "distillation without any inference server."
            )
            return engine
        self.records_teacher = True
        return self.topology.record_teacher(
            engine, self._record_teacher_logp, self.patches
        )

    def started(self) -> None:
        super().started()
        if self.topology.is_coordinator():
            config = self.trainer.config
            # Before anything is written: a second run on the path stops here.
            self.lock = RecordingLock.acquire(
                self.debug.path, f"{config.experiment_name}/{config.trial_name}"
            )
            write_manifest(self.debug.path, self.manifest())
        logger.info(f"Recording rollout batches to {self.debug.path}")

    def manifest(self) -> Manifest:
        config = self.trainer.config
        layout = self.topology.layout(self.trainer)
        layout.actor_backend = config.actor.backend
        layout.rollout_backend = config.rollout.backend
        return Manifest(
            format_version=FORMAT_VERSION,
            areal_debug_version=areal_debug_version(),
            areal_version=pkg_version("areal"),
            areal_build=areal_compat.installed_areal_build(),
            torch_version=torch.__version__,
            python_version=platform.python_version(),
            created=datetime.datetime.now(datetime.UTC).isoformat(),
            experiment_name=config.experiment_name,
            trial_name=config.trial_name,
            layout=layout,
            determinism=current_settings(),
            worker_determinism=self.worker_settings(),
            config=config_dict(config, self.debug),
            recorded_teacher_logp=self.records_teacher,
            missing_seams=[m.to_json() for m in self.trainer.missing_seams],
        )

    # -- each step -----------------------------------------------------------------
    def _record_batch(self, batch) -> None:
        """A data-parallel head's batch (or a Future of its fetched copy)."""
        if self.writer is None:
            actor = self.trainer.actor
            self.writer = RecordingWriter(
                self.debug.path,
                shard=actor.data_parallel_rank,
                num_shards=actor.data_parallel_world_size,
                steps_per_epoch=len(self.trainer.train_dataloader),
                max_pending=self.debug.max_pending_steps,
                clone_tensors=self.topology.clone_recorded_tensors(),
                records_teacher=self.records_teacher,
                compression=self.debug.compression,
                compression_level=self.debug.compression_level,
                compression_threads=self.debug.compression_threads,
                writer_process=self.debug.writer_process,
                fatal_errors=self.debug.fail_on_write_error,
                retention_policy=(
                    self.policy if self.topology.is_coordinator() else None
                ),
            )
        # The inference side runs inside the actor's prepare_batch, before the
        # clock advances: this is (part of) the batch of the step about to run.
        step = self.clock.preparing
        if self.policy.records(step):
            self.writer.submit_batch_part(step, batch)
            if self.seals_each_call:
                self.writer.seal_batch()

    def batch_complete(self, step: int) -> None:
        if self.writer is not None:
            self.writer.seal_batch()

    def _record_teacher_logp(self, logps) -> None:
        # The teacher scores the batch after it is ready: the current step's.
        if self.policy.records(self.clock.current):
            self.writer.submit_teacher_logp(self.clock.current, logps)

    def on_batch_ready(self, step: int) -> None:
        # Every rank joins the RNG gather, recorded step or not.
        states = self.topology.capture_rng(self.trainer)
        if states is not None and self.writer is not None and self.policy.records(step):
            self.writer.submit_rng(step, states)

    def local_rollout_failures(self, step: int) -> list[str]:
        # A rollout worker's failures: of the step whose end takes them.
        for text in self.topology.worker_rollout_failures(self.trainer):
            self.failures.note(step, text)
        return self.failures.reasons(step)  # taken every step: none pile up

    def on_step_stats(
        self, step: int, stats: dict[str, Any], rollout_failures: list[str]
    ) -> None:
        trained = training_stats(stats)
        reasons = (
            self.detector.check(trained) + rollout_failures if self.detector else []
        )
        if reasons and self.writer is not None:
            first = max(0, step - self.debug.anomaly_context_steps)
            logger.warning(
                f"Anomaly at step {step}: {'; '.join(reasons)}. Pinned steps "
                f"{first}-{step}: retention keeps them, with what replaying them "
                f"needs (debug.replay_start_step={step})."
            )
            # Queued before the step's stats, after which retention runs.
            self.writer.submit_pin(step, reasons, list(range(first, step + 1)))
        if self.writer is not None and self.policy.records(step):
            self.writer.submit_stats(
                step, trained, timing_stats(stats), inference_stats(stats)
            )

    def on_step_stages(self, step: int, stages, tensors, ref_forwards) -> None:
        if self.writer is not None and self.policy.records(step):
            self.writer.submit_stages(step, stages, tensors)

    def save_recover_checkpoint(self, default: Callable, epoch, epoch_step, step):
        before = areal_compat.last_recover_step(self.trainer)
        default(epoch, epoch_step, step)
        saved = areal_compat.last_recover_step(self.trainer) == step != before
        if saved and self.writer is not None:
            # A run resumed from this checkpoint records from step + 1 on: the
            # steps up to here must be whole on disk, or a crash now loses them.
            self.writer.flush()
        if saved:
            # AReaL overwrites its one recover checkpoint at the next save; a
            # replay of step N needs the one before N, so a copy stays with the
            # recording.
            if self.topology.is_coordinator():
                self._keep_checkpoint(step)
            self.topology.barrier(self.trainer)

    def _keep_checkpoint(self, step: int) -> None:
        config = self.trainer.config
        try:
            checkpoints.keep(
                config, self.debug.path, step, checkpoints.model_names(config)
            )
        except (OSError, areal_compat.RecoverLayoutError) as e:
            if self.debug.fail_on_write_error:
                raise
            # The copy is all or nothing (renamed into place): no half checkpoint.
            logger.error(
                f"Could not keep the recover checkpoint of step {step} with the "
                f"recording: {e!r}. Training goes on; a replay from a later step "
                "will start from an earlier kept checkpoint, or from the first "
                "recorded step. Free disk space to keep the next ones."
            )

    def _write_coverage(self) -> None:
        """The manifest says what the kept steps hold and lack (compare.coverage),
        read back from the files each head wrote."""
        try:
            reader = RecordingReader(self.debug.path)
            found = coverage(reader)
            manifest = reader.manifest
            manifest.coverage = found.to_json()
            atomic_write_json(
                os.path.join(self.debug.path, MANIFEST), manifest.to_json()
            )
        except (OSError, RecordingError) as e:
            logger.error(f"Could not write the recording's coverage: {e!r}")
            return
        for line in found.lines():
            logger.warning(f"Recording: {line}.")

    # -- the run -------------------------------------------------------------------
    def before_train(self, start: int, workflow, total_epochs):
        if self.topology.is_coordinator():
            sweep_leftovers(self.debug.path, start)
            supersede_steps(self.debug.path, start)
            if start > 0:
                logger.info(
                    f"Resumed at step {start}: once this run has recorded a few "
                    f"steps, `areal-debug resume {self.debug.path}` checks that the "
                    "resume started from the interrupted run's weights and lost or "
                    "repeated no prompt."
                )
        self.topology.barrier(self.trainer)
        return workflow

    def after_train(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close_recording(self) -> None:
        try:
            self.topology.close()
            if self.writer is not None:
                self.writer.close()
            if self.lock is not None:  # the coordinator, which wrote the manifest
                self._write_coverage()
        finally:
            if self.lock is not None:
                self.lock.release()
            if self._sglang_guard is not None:
                self._sglang_guard.restore()
