# SPDX-License-Identifier: Apache-2.0
"""The mode interface: debug off runs AReaL's own code at every hook; dump and
replay share the step clock, the instance patches and the stats interception."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from areal_debug import areal_compat, determinism
from areal_debug.config import DebugConfig, refuse_controller_v2
from areal_debug.logs import get_logger
from areal_debug.modes.step_clock import StepClock
from areal_debug.recording.atomic import atomic_write_json
from areal_debug.single_controller.probed_engines import WorkerStageProbes
from areal_debug.stages.blame import SampleBlame
from areal_debug.stages.names import MODEL_STAGE
from areal_debug.stages.probes import StageProbes
from areal_debug.stages.record import StageRecord
from areal_debug.stages.sample_parts import blame_path, step_parts
from areal_debug.stages.stage_log import merge_global

logger = get_logger("DebugMode")
# Under <fileroot>/<experiment>/<trial>/: each RPC worker's settings, as it reported them.
WORKER_SETTINGS_DIRNAME = "areal_debug_worker_settings"


class DebugMode:
    """Debug off: every hook calls ``default``, AReaL's own implementation, and
    nothing is installed, so the trainer behaves exactly as ``PPOTrainer``."""

    name = "off"

    def __init__(self, trainer, debug: DebugConfig):
        self.trainer = trainer
        self.debug = debug

    # -- around PPOTrainer.__init__ ------------------------------------------------
    def prepare(self, config, train_dataset, valid_dataset):
        """Before ``PPOTrainer.__init__``: adjust the config; return the datasets."""
        return train_dataset, valid_dataset

    def started(self) -> None:
        """After ``PPOTrainer.__init__`` succeeded."""

    def failed_init(self) -> None:
        """``PPOTrainer.__init__`` raised: no ``close()`` will follow."""

    # -- AReaL's hooks -------------------------------------------------------------
    def build_scheduler(self, default: Callable):
        return default()

    def build_dataloader(self, default: Callable, dataset, dataset_config, rank, ws):
        return default(dataset, dataset_config, rank, ws)

    def build_train_engine(self, default: Callable, actor_config, alloc):
        return default(actor_config, alloc)

    def build_critic(self, default: Callable, critic_config, alloc):
        return default(critic_config, alloc)

    def build_inference_engine(self, default: Callable, rollout_config, is_eval, lora):
        return default(rollout_config, is_eval, lora)

    def build_teacher_engine(self, default: Callable, rollout_config):
        return default(rollout_config)

    def save_recover_checkpoint(self, default: Callable, epoch, epoch_step, step):
        return default(epoch, epoch_step, step)

    def evaluate(self, default: Callable, *args):
        return default(*args)

    def start_agent_proxy(self, default: Callable):
        return default()

    def commit_step_stats(self, default: Callable, epoch, epoch_step, step):
        return default(epoch, epoch_step, step)

    def train(self, default: Callable, workflow, *args, **kwargs):
        return default(workflow, *args, **kwargs)

    def close(self, default: Callable):
        return default()


class ActiveMode(DebugMode):
    """What dump and replay share: the topology, one step clock advanced when a
    step's batch is ready, instance patches removed at close, and the step's
    statistics seen just before AReaL commits them."""

    def __init__(self, trainer, debug: DebugConfig, topology):
        super().__init__(trainer, debug)
        self.topology = topology
        self.clock = StepClock()
        self.patches = areal_compat.MethodPatches()
        self.worker_settings_dir: str | None = None
        self.config = None
        # In-process probes (SPMD) or the workers' (single-controller), when on.
        self.stage_probes: StageProbes | WorkerStageProbes | None = None
        # debug.blame_steps: each sample's part in those steps.
        self.blame: SampleBlame | None = None
        self.worker_probes = WorkerStageProbes()
        self._model_digested = False
        # AReaL up to cbff54d calls prepare_batch once a step: each call's batch
        # is the step's, complete at once (started() detects the build).
        self.seals_each_call = True

    def prepare(self, config, train_dataset, valid_dataset):
        # A user's own script reaches here without the launcher's check: still
        # before PPOTrainer starts any process.
        refuse_controller_v2(config)
        self.config = config
        if self.debug.deterministic:
            self._make_deterministic(config)
        return train_dataset, valid_dataset

    def _make_deterministic(self, config) -> None:
        determinism.enable_determinism()
        if not areal_compat.single_controller_mode():
            return  # SPMD: every process runs this trainer code itself.
        self.worker_settings_dir = os.path.join(
            config.cluster.fileroot,
            config.experiment_name,
            config.trial_name,
            WORKER_SETTINGS_DIRNAME,
        )
        shutil.rmtree(self.worker_settings_dir, ignore_errors=True)
        unchanged = determinism.configure_workers(config, self.worker_settings_dir)
        if unchanged:
            logger.warning(
                f"debug.deterministic: the workers of {unchanged} start with a custom "
                f"scheduling_spec cmd, not `python -m {determinism.RPC_SERVER_MODULE}`; "
                "they get the environment but not torch's deterministic algorithms. "
                f"Start them with `python -m {determinism.WORKER_MODULE}` instead."
            )

    def worker_settings(self) -> list[dict[str, Any]]:
        """What the RPC workers reported running with (single-controller mode)."""
        if self.worker_settings_dir is None:
            return []
        return determinism.read_worker_settings(self.worker_settings_dir)

    # -- subclass hooks ------------------------------------------------------------
    def on_batch_ready(self, step: int) -> None:
        """Every process, right after the step's batch is ready."""

    def on_step_stats(
        self, step: int, stats: dict[str, Any], rollout_failures: list[str]
    ) -> None:
        """The coordinator, with the statistics the step is about to commit and
        why rollouts of the step failed on any process (``rollout_failures``)."""

    def local_rollout_failures(self, step: int) -> list[str] | None:
        """Every process: why rollout requests of ``step`` failed in this process's
        inference engine; None where the mode watches none (nothing is gathered)."""
        return None

    def on_step_stages(
        self,
        step: int,
        stages: dict[str, Any],
        tensors: dict[str, Any],
        ref_forwards: int | None,
    ) -> None:
        """The coordinator, with every rank's stage digests of the step (merged),
        before ``on_step_stats``; ``tensors`` those kept in full; the reference
        model's forward passes over all ranks (None: no reference model)."""

    def on_model_digest(self, step: int, model: dict[str, list]) -> None:
        """The coordinator, with the actor's weights as the run's first step
        ``step`` starts (merged "model" digests: ``{parameter: [hex, None]}``),
        before the step trains."""

    def before_train(self, start: int, workflow, total_epochs):
        return workflow

    def after_train(self) -> None:
        pass

    def close_recording(self) -> None:
        pass

    # -- shared --------------------------------------------------------------------
    def started(self) -> None:
        # Without AReaL's commit in sight a step cannot be seen to end: each
        # prepare_batch call is then a step, as AReaL up to cbff54d makes them.
        self.clock.closes_at_commit = areal_compat.Capability.STATISTICS.value not in {
            m.capability for m in getattr(self.trainer, "missing_seams", ())
        }
        self.patches.wrap(self.trainer.actor, "prepare_batch", self._clocked)
        self.seals_each_call = not areal_compat.collects_in_several_calls()
        if not self.seals_each_call:
            # The step's batch is whole when the trainer first hands it on: a
            # crash in the step's training finds it recorded.
            for engine, method in areal_compat.batch_users(self.trainer):
                self.patches.wrap(engine, method, self._completing)
        self.topology.patch_actor(self.trainer, self.patches)
        if self.debug.stage_digests:
            self.stage_probes = self.topology.start_stage_probes(
                self.trainer,
                self.patches,
                self.worker_probes,
                self.debug.kept_stage_tensors(),
                self.uses_recorded_ref(),
            )
        if self.debug.blames:
            # After the stage probes: its passes run outside their digests.
            self.blame = self.topology.start_blame(
                self.trainer, self.patches, self.worker_probes
            )

    def wants_layer_digests(self, step: int) -> bool:
        """Whether the log-prob forward pass of step ``step`` digests the layers."""
        return self.debug.layer_digests_at(step)

    def uses_recorded_ref(self) -> bool:
        """The reference's recorded log-probs stand in for its forward pass."""
        return False

    def build_train_engine(self, default: Callable, actor_config, alloc):
        engine = default(actor_config, alloc)
        # Identity, not equality: the reference's config may equal the actor's.
        if actor_config is self.config.actor:
            self._probe_workers("actor", engine)
        elif actor_config is getattr(self.config, "ref", None):
            self._probe_workers("ref", engine)
        return engine

    def build_critic(self, default: Callable, critic_config, alloc):
        engine = default(critic_config, alloc)
        self._probe_workers("critic", engine)
        return engine

    def _probe_workers(self, role: str, engine) -> None:
        """Single-controller: the workers build engines that digest the stages
        (and run the blame passes)."""
        wanted = self.debug.stage_digests or self.debug.blames
        if not (wanted and areal_compat.single_controller_mode()):
            return
        why_not = self.worker_probes.probe(role, engine)
        if why_not is not None:
            logger.warning(
                f"Stage digests skip the {role}: {why_not} (they cover AReaL's "
                "FSDP engines). The replay compares its other stages as usual."
            )

    def batch_complete(self, step: int) -> None:
        """Step ``step``'s batch is whole: the trainer hands it on, or its
        statistics are about to commit (called once or more per step)."""

    def _completing(self, use: Callable) -> Callable:
        def completed_then_used(*args, **kwargs):
            if self.clock.collecting:
                self.batch_complete(self.clock.current)
            return use(*args, **kwargs)

        return completed_then_used

    def more_of_step(self, step: int) -> None:
        """AReaL asks for more of step ``step``'s batch (#1563: not enough groups
        for every data-parallel consumer yet), before the call runs."""

    def _clocked(self, prepare_batch: Callable) -> Callable:
        def prepare_and_advance(*args, **kwargs):
            if self.clock.collecting:
                self.more_of_step(self.clock.current)
            batch = prepare_batch(*args, **kwargs)
            step = self.clock.advance()
            if step is None:
                return batch  # more of the step's batch: it is already current
            self.on_batch_ready(step)
            if self.blame is not None:
                self.blame.on = self.debug.blame_at(step)
            if self.stage_probes is not None:
                self.topology.digest_layers(
                    self.stage_probes, self.wants_layer_digests(step)
                )
            if not self._model_digested:
                self._digest_model(step)
            return batch

        return prepare_and_advance

    def _digest_model(self, step: int) -> None:
        """Once, when the first step's batch is ready: AReaL has restored any
        checkpoint by then, and the step has not trained yet."""
        self._model_digested = True
        if self.stage_probes is None:
            return
        per_rank = self.topology.digest_model(self.trainer, self.stage_probes)
        if per_rank is not None:
            merged = merge_global([{MODEL_STAGE: d} for d in per_rank])
            self.on_model_digest(step, merged["global"].get(MODEL_STAGE, {}))

    def failed_init(self) -> None:
        self.patches.remove_all()
        self.topology.end_workers()

    def build_scheduler(self, default: Callable):
        scheduler = default()
        areal_compat.lengthen_ray_startup(scheduler)
        base = areal_compat.send_importable_config(scheduler, self.trainer.config)
        if base is not None:
            logger.info(
                f"The config class {type(self.trainer.config).__qualname__} lives in "
                f"the script's __main__, which RPC workers cannot import: they get "
                f"its {base.__name__} fields (all they read is the seed)."
            )
        self.topology.watch_scheduler(scheduler)
        return scheduler

    def commit_step_stats(self, default: Callable, epoch, epoch_step, step):
        if step < 0:
            # AReaL after cbff54d (#1636, eval_before_train) commits the
            # evaluation's statistics at global step -1, before the first step:
            # neither a step to record nor one to compare.
            return default(epoch, epoch_step, step)
        self.clock.check(step, "the step's statistics commit")
        self.batch_complete(step)
        if self.stage_probes is not None:
            self._gather_stages(step)
        if self.blame is not None and self.blame.on:
            self._write_blame(step)

        # Every process joins: each data-parallel head watches its own engine.
        local = self.local_rollout_failures(step)
        failed = (
            [] if local is None else self.topology.gather_reasons(self.trainer, local)
        )

        def seen(stats: dict[str, Any]) -> None:
            if self.topology.is_coordinator():
                self.on_step_stats(step, stats, failed)

        areal_compat.export_and_commit_stats(
            self.trainer, epoch, epoch_step, step, seen
        )

    def _write_blame(self, step: int) -> None:
        gathered = self.topology.gather_blame(self.trainer, self.blame)
        if not gathered:
            return  # not the coordinator
        path = blame_path(areal_compat.stats_log_dir(self.trainer), step)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write_json(path, step_parts(step, gathered, self.debug.path))
        logger.info(f"Step {step}: each sample's part written to {path}.")

    def _gather_stages(self, step: int) -> None:
        # Every rank joins the gather; the digests are a few KiB per rank.
        records: list[StageRecord] | None = self.topology.gather_stages(
            self.trainer, self.stage_probes
        )
        if records is None or any(r.digests is None for r in records):
            return  # not the coordinator, or a rank's digests failed (it said why)
        stages = merge_global(
            [r.digests for r in records], [r.seconds for r in records]
        )
        tensors = {}
        for rank, record in enumerate(records):
            tensors.update(record.keyed_tensors(rank))
        counts = [r.ref_forwards for r in records if r.ref_forwards is not None]
        self.on_step_stages(step, stages, tensors, sum(counts) if counts else None)

    def train(self, default: Callable, workflow, *args, **kwargs):
        start = areal_compat.recover_start_step(self.trainer)
        self.clock.start(start)
        workflow = self.before_train(start, workflow, kwargs.get("total_epochs"))
        try:
            return default(workflow, *args, **kwargs)
        finally:
            self.after_train()

    def close(self, default: Callable):
        try:
            self.close_recording()
        finally:
            try:
                default()
            finally:
                self.patches.remove_all()
                self.topology.end_workers()
