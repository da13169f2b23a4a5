# SPDX-License-Identifier: Apache-2.0
"""Replay mode: a replay engine in the inference engine's place, statistics compared.

The hooks only; what they decide and do is elsewhere: which steps run
(``replay_plan.py``), the recording, config and checkpoint before the first step
(``replay_setup.py``), the comparison and its report (``replay_comparison.py``), the
recorded reference log-probs (``replay_reference.py``) and the stand-ins for the
inference engine and the dataloader (``engines.py``, ``replay_loader.py``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from areal.api import RolloutWorkflow

from areal_debug import areal_compat
from areal_debug.compare.config_changes import (
    config_dict,
    story_start,
    training_changes,
)
from areal_debug.compare.coverage import coverage
from areal_debug.compare.replay import (
    ReplayComparison,
    determinism_changes,
    topology_change,
)
from areal_debug.compare.report import REPORT_NAME, not_compared
from areal_debug.config import earlier_replays_note, replaced_report_note
from areal_debug.logs import get_logger
from areal_debug.modes import replay_setup
from areal_debug.modes.base import ActiveMode
from areal_debug.modes.engines import ReplayEngine, ReplayTeacher
from areal_debug.modes.replay_loader import ReplayDataLoader
from areal_debug.modes.replay_reference import RecordedReference
from areal_debug.modes.replay_setup import (
    UnsupportedReplayError as UnsupportedReplayError,  # imported from here too
)
from areal_debug.modes.step_clock import StepClockError
from areal_debug.recording.reader import RecordingReader
from areal_debug.replay_plan import ReplayPlan
from areal_debug.stages.names import LAYERS_STAGE

logger = get_logger("DebugReplay")


class _NeverRunWorkflow(RolloutWorkflow):
    """Lets ``train(workflow=None)`` pass AReaL's check in replay mode."""

    async def arun_episode(self, engine, data):  # pragma: no cover - never called
        raise RuntimeError("Replay mode never runs a rollout workflow.")


class ReplayMode(ActiveMode):
    name = "replay"

    def __init__(self, trainer, debug, topology):
        super().__init__(trainer, debug, topology)
        self.reader: RecordingReader | None = None
        self.plan: ReplayPlan | None = None
        self.engine: ReplayEngine | None = None
        self.comparison: ReplayComparison | None = None
        self.reference: RecordedReference | None = None
        self._recorded_stages: Callable[[int], Any] | None = None
        self._eval_skip_logged = False
        self._rng_warned = False

    # -- building ------------------------------------------------------------------
    def prepare(self, config, train_dataset, valid_dataset):
        # Fail on a bad path before any model is built.
        self.reader = replay_setup.open_recording(self.debug.path)
        # Read once per step: the reference's stand-in and the comparison share it.
        self._recorded_stages = functools.lru_cache(maxsize=1)(
            self.reader.recorded_stages
        )
        replay_setup.refuse_unsupported(config, self.reader.manifest)
        replay_setup.refuse_bad_drops(config, self.reader, self.debug)
        self.plan = ReplayPlan.of(
            self.debug.path,
            self.debug.replay_start_step,
            self.debug.replay_end_step,
            config.total_train_steps,
        )
        replay_setup.adjust_config(config, self.plan)
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

    def build_dataloader(self, default: Callable, dataset, dataset_config, rank, ws):
        if dataset_config is self.trainer.config.train_dataset:
            return ReplayDataLoader(self.reader, rank, ws, self.debug.dropped_samples())
        return default(dataset, dataset_config, rank, ws)

    def build_inference_engine(self, default: Callable, rollout_config, is_eval, lora):
        if is_eval:
            return None
        # Runs after the train engines exist and before AReaL's RecoverHandler.load.
        self.patches.wrap(
            self.trainer.actor, "update_weights", lambda original: _skip_weight_update
        )
        if self.plan.checkpoint is not None:
            replay_setup.install_checkpoint(
                self.trainer, self.topology, self.debug.path, self.plan.checkpoint
            )
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
            actor.data_parallel_rank,
            actor.data_parallel_world_size,
            self.debug.dropped_samples(),
        )
        logger.info(
            "Replay: online mode (rollout.agent.mode=online): the recording stands "
            "in for the clients and the proxy gateway; neither is started."
        )

    def uses_recorded_ref(self) -> bool:
        return self.reference is not None and self.reference.used

    def started(self) -> None:
        manifest = self.reader.manifest
        topology = topology_change(manifest.layout, self.topology.layout(self.trainer))
        self.reference = RecordedReference(
            self.reader,
            self._recorded_stages,
            self.debug.replay_recorded_ref_logp,
            "ref" in areal_compat.stage_engines(self.trainer),
        )
        self.reference.check_layout(topology)
        super().started()
        self.reference.check_probed(self.stage_probes)
        if topology.changed and self.topology.is_coordinator():
            logger.warning(topology.describe())
        changed = determinism_changes(manifest, self.worker_settings())
        if changed:
            logger.warning(
                "Determinism settings differ from the dump run's, so the replay may "
                "not be bitwise: " + "; ".join(changed)
            )
        areal_change = areal_compat.areal_build_change(
            manifest.areal_build, manifest.areal_version
        )
        if areal_change is not None and self.topology.is_coordinator():
            logger.warning(f"{areal_change}: {areal_compat.AREAL_CHANGE_MOVES}.")
        report = os.path.join(areal_compat.stats_log_dir(self.trainer), REPORT_NAME)
        if self.topology.is_coordinator():
            self._say_where_the_report_goes(report)
        self.comparison = ReplayComparison(
            self.reader, self.debug, topology, report, self._recorded_stages
        )
        self.comparison.report.areal_change = areal_change
        self.comparison.report.not_compared = not_compared(
            manifest.missing_seams, self.trainer.missing_seams
        ) + [f"{line} in the recording" for line in self._recording_gaps()]
        if manifest.config:
            changes = training_changes(
                manifest.config, config_dict(self.trainer.config, self.debug)
            )
            self.comparison.report.config_changes = [c.to_json() for c in changes]
            story = story_start(changes)
        else:
            story = (
                "Replay: the recording keeps no config (an earlier areal-debug made "
                "it), so the training settings are not compared."
            )
        if self.topology.is_coordinator():
            logger.info(story)

    def _recording_gaps(self) -> list[str]:
        """What the steps this replay runs lack in the recording (coverage)."""
        last = self.plan.last_step
        steps = [
            s
            for s in self.reader.available_steps()
            if s >= self.plan.first_step and (last is None or s <= last)
        ]
        return coverage(self.reader, steps).lines()

    def on_model_digest(self, step: int, model: dict[str, list]) -> None:
        self.comparison.check_model(step, model, str(self.trainer.config.actor.path))

    def _say_where_the_report_goes(self, report: str) -> None:
        """A replay under a fresh trial says which earlier reports it kept; one
        named onto an earlier replay's trial says that it replaces its report."""
        name = self.debug.replay_trial_name or ""
        note = earlier_replays_note(self.reader.manifest.trial_name, name)
        if note:
            logger.info(note)
        elif os.path.exists(report):
            logger.warning(replaced_report_note(name, report))

    # -- each step -----------------------------------------------------------------
    def more_of_step(self, step: int) -> None:
        # AReaL after cbff54d (#1563) calls prepare_batch again until the batch
        # holds a group for every data-parallel consumer; the recorded batch is
        # the whole step, so asking for more means this topology needs more.
        groups = self.reader.step_meta(step).num_trajectories
        raise UnsupportedReplayError(
            f"AReaL asked for more of step {step}'s batch, but the recording's step "
            f"{step} is all the dump run trained ({groups} groups): this allocation "
            "needs at least one group per data-parallel rank of each model it "
            "trains, more than the recorded step holds. Replay with a data-parallel "
            f"size of at most {groups} (actor, critic and reference alike)."
        )

    def on_batch_ready(self, step: int) -> None:
        served = self.engine.take_served_step() if self.engine is not None else None
        if served is not None and served != step:
            raise StepClockError(
                f"The replay engine served the recording's step {served} for step "
                f"{step}: the ReplayDataLoader position and the step clock disagree "
                "(a dataloader state restored from another run?)."
            )
        if self.debug.restore_rng:
            self._restore_rng(step)
        if self.uses_recorded_ref():
            self.topology.hand_over_ref_logp(
                self.stage_probes, step, self.reference.tensors(step)
            )

    def _restore_rng(self, step: int) -> None:
        problem = self.topology.restore_rng(self.reader.recorded_rng(step), step)
        if problem is not None and not self._rng_warned:
            self._rng_warned = True
            logger.warning(
                f"Replay: RNG states not restored at step {step} ({problem}); "
                "training-side randomness (dropout) may differ."
            )

    def wants_layer_digests(self, step: int) -> bool:
        # Where the recording has them, so that they compare; and where asked.
        # Digests only: every rank asks, and the kept tensors are the
        # coordinator's to read (for the comparison) at the step's end.
        recorded, _ = self.reader.recorded_stages(step, tensors=False)
        ranks = (recorded or {}).get("ranks", [])
        return any(LAYERS_STAGE in r for r in ranks) or super().wants_layer_digests(
            step
        )

    def on_step_stages(self, step: int, stages, tensors, ref_forwards) -> None:
        self.comparison.add_stages(
            step, stages, tensors, ref_forwards, self.reference.source
        )

    def on_step_stats(
        self, step: int, stats: dict[str, Any], rollout_failures: list[str]
    ) -> None:
        loader = self._loader()
        wait = loader.waits.pop(step, None) if loader is not None else None
        self.comparison.add_step(step, stats, wait)

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
        config = self.trainer.config
        epochs = total_epochs if total_epochs is not None else config.total_train_epochs
        stop = self.plan.stop(epochs, len(self.trainer.train_dataloader))
        self.reader.require_steps(range(start, stop))
        self.reference.require(start)
        replay_setup.announce_start(start, self.debug.replay_start_step)
        loader = self._loader()
        if loader is not None:
            loader.prefetch(start)
        return _NeverRunWorkflow() if workflow is None else workflow

    def after_train(self) -> None:
        if self.topology.is_coordinator() and self.comparison is not None:
            for line in self.comparison.summary_lines():
                logger.info(line)
            beside = self.comparison.report.train_infer()
            if beside is not None:
                logger.info(f"Replay: {beside}")
            self.reference.log_summary(self.comparison.reference_forwards())
            story = self.comparison.report.headline()
            down = self.comparison.one_level_down()
            # The story last: what a user reads first when the run ends.
            logger.info(f"Replay story: {story}" + (f"; {down}" if down else ""))

    def close_recording(self) -> None:
        loader = self._loader()
        if loader is not None:
            loader.close()


def _skip_weight_update(meta) -> None:
    # Nothing receives weights in replay; saving them each step would only cost time.
    pass
