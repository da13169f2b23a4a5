# SPDX-License-Identifier: Apache-2.0
"""Replay mode: a replay engine in the inference engine's place, statistics compared."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from areal.api import RolloutWorkflow
from areal.utils import logging

from areal_debug import areal_compat
from areal_debug.compare.report import REPORT_NAME, TopologyChange
from areal_debug.compare.statistics import StatsComparison, timing_stats, training_stats
from areal_debug.determinism import current_settings, differences
from areal_debug.modes.base import ActiveMode
from areal_debug.modes.engines import ReplayEngine, ReplayTeacher
from areal_debug.modes.replay_loader import ReplayDataLoader
from areal_debug.modes.step_clock import StepClockError
from areal_debug.recording import checkpoints
from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.format import RecordingError
from areal_debug.recording.lock import describe
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.stages.comparison import compare_stages
from areal_debug.stages.recorded_ref_logp import ref_logp_tensors

# The replay report's per-step timing of what the loop waited for recorded data.
REPLAY_WAIT = "replay/wait_for_data"

logger = logging.getLogger("DebugReplay")


class UnsupportedReplayError(RecordingError):
    """A run whose replay cannot be made inference-free (yet)."""


class _NeverRunWorkflow(RolloutWorkflow):
    """Lets ``train(workflow=None)`` pass AReaL's check in replay mode."""

    async def arun_episode(self, engine, data):  # pragma: no cover - never called
        raise RuntimeError("Replay mode never runs a rollout workflow.")


class ReplayMode(ActiveMode):
    name = "replay"

    def __init__(self, trainer, debug, topology):
        super().__init__(trainer, debug, topology)
        self.reader: RecordingReader | None = None
        self.engine: ReplayEngine | None = None
        self.comparison: StatsComparison | None = None
        self.resume_from: int | None = None
        self._eval_skip_logged = False
        self._rng_warned = False
        self._stages: dict[int, dict[str, Any]] = {}
        self._stages_read: tuple[int | None, Any] = (None, None)

    # -- building ------------------------------------------------------------------
    def prepare(self, config, train_dataset, valid_dataset):
        # Fail on a bad path before any model is built.
        self.reader = RecordingReader(self.debug.path)
        writer = self.reader.writer()
        if writer is not None:
            logger.warning(
                f"The recording at {self.debug.path} is still being written by a "
                f"dump run ({describe(writer)}). This replay uses the steps that "
                f"are complete ({format_ranges(self.reader.available_steps())}); "
                "if that run deletes old steps (debug.keep_last_steps, "
                "debug.max_disk_gb), pin the ones you replay (debug.pin_steps)."
            )
        self._adjust_config(config)
        super().prepare(config, train_dataset, valid_dataset)
        if train_dataset is not None or valid_dataset is not None:
            logger.info(
                "Replay: the datasets are not read (the batches come from the "
                "recording, evaluation needs an inference engine); no data-service "
                "workers are started."
            )
        # PPOTrainer insists on a train dataset: an empty list is not an RDataset,
        # so single-controller mode starts no data service for it.
        return [], None

    def _adjust_config(self, config) -> None:
        _refuse_unsupported(config, self.reader.manifest)
        if config.actor.weight_update_mode != "disk":
            # xccl would open a weight-update group towards inference servers
            # in __init__; replay sends no weights, so the mode is irrelevant.
            logger.info(
                f"Replay: actor.weight_update_mode={config.actor.weight_update_mode} "
                "read as 'disk' (replay sends no weights anywhere)."
            )
            config.actor.weight_update_mode = "disk"
        target = self.debug.replay_start_step
        if target is not None:
            self.resume_from = checkpoints.latest_before(self.debug.path, target)
        # A replay restores only a checkpoint kept with the recording, never one
        # of an earlier replay left in its own trial.
        mode = "on" if self.resume_from is not None else "disabled"
        if config.recover.mode != mode:
            logger.info(f"Replay: recover.mode={config.recover.mode} read as {mode!r}.")
            config.recover.mode = mode
        end = self.debug.replay_end_step
        if end is not None and (
            config.total_train_steps is None or config.total_train_steps > end + 1
        ):
            logger.info(f"Replay: stopping after step {end} (debug.replay_end_step).")
            config.total_train_steps = end + 1

    def build_dataloader(self, default: Callable, dataset, dataset_config, rank, ws):
        if dataset_config is self.trainer.config.train_dataset:
            return ReplayDataLoader(self.reader, dp_rank=rank, dp_size=ws)
        return default(dataset, dataset_config, rank, ws)

    def build_inference_engine(self, default: Callable, rollout_config, is_eval, lora):
        if is_eval:
            return None
        # Runs after the train engines exist and before AReaL's RecoverHandler.load.
        self.patches.wrap(
            self.trainer.actor, "update_weights", lambda original: _skip_weight_update
        )
        if self.resume_from is not None:
            self._install_checkpoint(self.resume_from)
        if areal_compat.online_mode(self.trainer):
            self._replace_online_dataloader()
        self.engine = ReplayEngine(
            self.trainer.train_dataloader, self.topology.present_replayed
        )
        self.engine.initialize()
        return self.engine

    def build_teacher_engine(self, default: Callable, rollout_config):
        logger.info(
            "Replay: the teacher's log-probs come from the recording (no teacher "
            "server or worker is started)."
        )
        return ReplayTeacher(
            self.reader,
            lambda: self.clock.current,
            self.topology.present_replayed_values,
        )

    def _replace_online_dataloader(self) -> None:
        # Online mode: AReaL builds an empty dataloader itself (no hook) and the
        # batches came from clients through the proxy gateway; the recording
        # stands in for both, so no proxy or gateway is started either.
        actor = self.trainer.actor
        self.trainer.train_dataloader = ReplayDataLoader(
            self.reader,
            dp_rank=actor.data_parallel_rank,
            dp_size=actor.data_parallel_world_size,
        )
        logger.info(
            "Replay: online mode (rollout.agent.mode=online): the recording stands "
            "in for the clients and the proxy gateway; neither is started."
        )

    def _install_checkpoint(self, step: int) -> None:
        if self.topology.is_coordinator():
            checkpoints.install(
                self.trainer.config,
                self.debug.path,
                step,
                checkpoints.model_names(self.trainer.config),
                self.topology.process_count(),
            )
        self.topology.barrier(self.trainer)
        logger.info(
            f"Replay: restoring the dump run's recover checkpoint of step {step} "
            f"(kept with the recording) to start at step {step + 1}."
        )

    def uses_recorded_ref(self) -> bool:
        return self.debug.replay_recorded_ref_logp and self._has_ref

    @property
    def _has_ref(self) -> bool:
        return "ref" in areal_compat.stage_engines(self.trainer)

    def started(self) -> None:
        reader = self.reader
        layout = reader.manifest.layout
        replay = self.topology.layout(self.trainer)
        topology = TopologyChange(
            recorded_mode=layout.mode,
            replay_mode=replay.mode,
            recorded_heads=layout.num_shards,
            replay_heads=replay.num_shards,
            recorded_train_dp=layout.training_dp_size,
            replay_train_dp=replay.training_dp_size,
        )
        self._check_recorded_ref(topology)
        super().started()
        if self.uses_recorded_ref() and self.stage_probes is None:
            raise UnsupportedReplayError(
                "debug.replay_recorded_ref_logp=true, but the reference engine is "
                "not probed (stage digests cover AReaL's FSDP engines), so nothing "
                "can stand in for its forward pass. Replay without the option."
            )
        if topology.changed and self.topology.is_coordinator():
            logger.warning(topology.describe())
        changed = differences(reader.manifest.determinism, current_settings())
        workers = self.worker_settings()
        if reader.manifest.worker_determinism and workers:
            changed += [
                f"workers' {c}"
                for c in differences(reader.manifest.worker_determinism[0], workers[0])
            ]
        if changed:
            logger.warning(
                "Determinism settings differ from the dump run's, so the replay may "
                "not be bitwise: " + "; ".join(changed)
            )
        self.comparison = StatsComparison(
            reader.path, self.debug.verify_rtol, self.debug.verify_atol, topology
        )

    def _check_recorded_ref(self, topology: TopologyChange) -> None:
        if not self.debug.replay_recorded_ref_logp:
            return
        if not self._has_ref:
            logger.warning(
                "debug.replay_recorded_ref_logp=true, but this run has no reference "
                "model (ref with actor.kl_ctl > 0): the option changes nothing."
            )
            return
        if topology.changed:
            raise UnsupportedReplayError(
                "debug.replay_recorded_ref_logp=true needs the dump run's "
                "data-parallel layout (each rank's recorded reference log-probs "
                f"are its own trajectories'), but {topology.describe()} Replay on "
                "the dump's layout, or without the option (the reference model "
                "then runs)."
            )
        logger.info(
            "Replay: the reference log-probs come from the recording "
            "(debug.replay_recorded_ref_logp): the reference model's forward pass "
            "does not run, and its stage is identical to the dump's by construction."
        )

    # -- each step -----------------------------------------------------------------
    def on_batch_ready(self, step: int) -> None:
        served = self.engine.take_served_step() if self.engine is not None else None
        if served is not None and served != step:
            raise StepClockError(
                f"The replay engine served the recording's step {served} for step "
                f"{step}: the ReplayDataLoader position and the step clock disagree "
                "(a dataloader state restored from another run?)."
            )
        if self.debug.restore_rng:
            problem = self.topology.restore_rng(self._recorded_rng(step), step)
            if problem is not None and not self._rng_warned:
                self._rng_warned = True
                logger.warning(
                    f"Replay: RNG states not restored at step {step} ({problem}); "
                    "training-side randomness (dropout) may differ."
                )

        if self.uses_recorded_ref():
            _, tensors = self._recorded_stages(step)
            self.topology.hand_over_ref_logp(
                self.stage_probes, step, ref_logp_tensors(tensors)
            )

    def _recorded_rng(self, step: int):
        return self.reader.recorded_rng(step)

    def _recorded_stages(self, step: int):
        """The step's recorded stages, read once per step (the reference's
        stand-in and the comparison both need them)."""
        if self._stages_read[0] != step:
            self._stages_read = (step, self.reader.recorded_stages(step))
        return self._stages_read[1]

    def on_step_stages(self, step: int, stages, tensors, ref_forwards) -> None:
        recorded, recorded_tensors = self._recorded_stages(step)
        same_layout = not self.comparison.report.topology.changed
        compared = compare_stages(
            recorded, stages, same_layout, recorded_tensors, tensors
        )
        if "ref_logp" in compared:
            # Whether the reference model ran, and how often: the evidence for
            # "recorded" (identical by construction) or "computed".
            compared["ref_logp"]["source"] = (
                "recorded" if self.uses_recorded_ref() else "computed"
            )
            compared["ref_logp"]["reference_forwards"] = ref_forwards
        self._stages[step] = compared

    def on_step_stats(self, step: int, stats: dict[str, Any]) -> None:
        recorded = self.reader.recorded_stats(step)
        if recorded is not None:
            recorded = training_stats(recorded)
        timings = timing_stats(stats)
        loader = self._loader()
        if loader is not None and step in loader.waits:
            # What prefetching leaves of reading the recording (step-time units).
            timings[REPLAY_WAIT] = loader.waits.pop(step)
        entry = self.comparison.add(
            step, recorded, training_stats(stats), timings, self._stages.pop(step, None)
        )
        atomic_write_json(self.report_path, self.comparison.report.to_json())
        if entry.status != "diverged":
            return
        first = self.comparison.report.first_stage_divergence()
        msg = (
            f"Replay step {step} diverged from the recording (first divergence: "
            f"step {first['step']}, stage {first['stage']}, at {first['where']}"
            + _recorded_replayed(first)
            + f"); report: {self.report_path}"
        )
        if self.debug.fail_on_divergence:
            raise RecordingError(msg + ". Stopping (debug.fail_on_divergence).")
        logger.warning(msg)

    @property
    def report_path(self) -> str:
        return os.path.join(areal_compat.stats_log_dir(self.trainer), REPORT_NAME)

    def evaluate(self, default: Callable, eval_workflow, *args):
        if not self._eval_skip_logged and eval_workflow is not None:
            logger.info("Replay: evaluation rollouts skipped (no inference engine).")
            self._eval_skip_logged = True

    def start_agent_proxy(self, default: Callable):
        return None

    # -- the run -------------------------------------------------------------------
    def _loader(self) -> ReplayDataLoader | None:
        loader = getattr(self.trainer, "train_dataloader", None)
        return loader if isinstance(loader, ReplayDataLoader) else None

    def before_train(self, start: int, workflow, total_epochs):
        self.reader.require_steps(range(start, self._end_step(total_epochs)))
        if self.uses_recorded_ref():
            self._require_recorded_ref(start)
        self._announce_start(start)
        loader = self._loader()
        if loader is not None:
            loader.prefetch(start)
        return _NeverRunWorkflow() if workflow is None else workflow

    def _require_recorded_ref(self, start: int) -> None:
        _, tensors = self._recorded_stages(start)
        if not ref_logp_tensors(tensors):
            raise UnsupportedReplayError(
                f"debug.replay_recorded_ref_logp=true, but step {start} of the "
                f"recording at {self.reader.path} holds no reference log-probs. "
                "Record with debug.record_ref_logp=true (or "
                "debug.record_stage_tensors=true), or replay without the option."
            )

    def _end_step(self, total_epochs: int | None) -> int:
        config = self.trainer.config
        epochs = total_epochs if total_epochs is not None else config.total_train_epochs
        end = epochs * len(self.trainer.train_dataloader)
        if config.total_train_steps is not None:
            end = min(end, config.total_train_steps)
        return end

    def _announce_start(self, start: int) -> None:
        target = self.debug.replay_start_step
        if target is None or target <= start:
            if target is not None:
                logger.info(
                    f"Replay: starting at step {start} "
                    f"(debug.replay_start_step={target})."
                )
            return
        logger.info(
            f"Replay: debug.replay_start_step={target}, but no recover checkpoint of "
            f"the dump run restores the policy before step {target}; replaying from "
            f"step {start} to rebuild it (no inference, so cheap). Steps before "
            f"{target} are compared too."
        )

    def after_train(self) -> None:
        if self.topology.is_coordinator() and self.comparison is not None:
            for line in self.comparison.summary_lines():
                logger.info(line)
            if self.uses_recorded_ref():
                forwards = [
                    e.stages.get("ref_logp", {}).get("reference_forwards")
                    for e in self.comparison.report.steps
                ]
                logger.info(
                    "Reference log-probs taken from the recording at every step "
                    "(identical by construction); reference forward passes run: "
                    f"{sum(f or 0 for f in forwards)}."
                )

    def close_recording(self) -> None:
        loader = self._loader()
        if loader is not None:
            loader.close()


def _refuse_unsupported(config, manifest) -> None:
    """Runs a replay cannot make inference-free: one clear message each."""
    teacher = getattr(config, "teacher", None)
    if (
        teacher is not None
        and getattr(teacher, "engine_type", None) == "rollout"
        and not manifest.recorded_teacher_logp
    ):
        raise UnsupportedReplayError(
            "This run has a teacher served as an inference engine "
            "(teacher.engine_type=rollout), but the recording holds no teacher "
            "log-probs (recorded in SPMD mode, without a teacher, or by an older "
            "areal-debug), so the replay would have to start the "
            "teacher's servers. Record in single-controller mode "
            "(scheduler.type=local) with the teacher, use teacher.engine_type=train "
            "(the teacher runs on the training side and replays as usual), or "
            "replay without the teacher (teacher=null)."
        )


def _recorded_replayed(first: dict[str, Any]) -> str:
    if "recorded" in first and "replayed" in first:
        return f", recorded {first['recorded']!r}, replayed {first['replayed']!r}"
    return ""


def _skip_weight_update(meta) -> None:
    # Nothing receives weights in replay; saving them each step would only cost time.
    pass
