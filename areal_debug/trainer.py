# SPDX-License-Identifier: Apache-2.0
"""DebugPPOTrainer: AReaL's PPOTrainer with rollout recording and replay.

A training script changes two lines (config class, trainer class). With the
``debug`` flags off nothing differs from ``PPOTrainer``. In dump mode the
inference engine is wrapped so each data-parallel head's ``prepare_batch``
output is recorded (single-controller mode: the rollout controller's, on the
controller); in replay mode no engine is built and a ReplayEngine returns the
recorded batches into AReaL's unchanged training loop.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
from copy import deepcopy
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as pkg_version
from typing import Any

import torch
import torch.distributed as dist
from areal.api import RolloutWorkflow
from areal.engine import RemoteSGLangEngine, RemotevLLMEngine
from areal.infra import current_platform
from areal.trainer.rl_trainer import PPOTrainer
from areal.utils import logging
from areal.utils.environ import is_single_controller
from areal.utils.stats_logger import StatsLogger

from areal_debug import checkpoints, rng_state
from areal_debug.config import DebugConfig
from areal_debug.cpu_server import (
    allow_sglang_client_without_sglang,
    missing_sglang_error,
)
from areal_debug.determinism import current_settings, differences, enable_determinism
from areal_debug.engines import RecordingEngine, ReplayEngine
from areal_debug.replay_loader import ReplayDataLoader
from areal_debug.single_controller import (
    BatchFetcher,
    WorkerReaper,
    as_inline_rtensors,
    record_controller_batches,
    server_infos_from_env,
    without_inline_rtensors,
)
from areal_debug.store_format import FORMAT_VERSION, RecordingError, atomic_write_json
from areal_debug.store_reader import RecordingReader
from areal_debug.store_writer import RecordingWriter, supersede_steps, write_manifest
from areal_debug.verify import (
    REPORT_NAME,
    ReplayVerifier,
    describe_topology_change,
    inference_stats,
    timing_stats,
    training_stats,
)

logger = logging.getLogger("DebugPPOTrainer")


class _NeverRunWorkflow(RolloutWorkflow):
    """Lets ``train(workflow=None)`` pass AReaL's check in replay mode."""

    async def arun_episode(self, engine, data):  # pragma: no cover - never called
        raise RuntimeError("Replay mode never runs a rollout workflow.")


def _is_rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _trains_on_cpu() -> bool:
    # On an accelerator AReaL copies the batch to the device before any use
    # (dist_rollout.tensor_container_to), so the host tensors the engine returned
    # stay untouched and need no clone; on CPU that .to() returns the same tensors.
    return torch.device(current_platform.current_device()).type == "cpu"


class DebugPPOTrainer(PPOTrainer):
    def __init__(self, config, train_dataset=None, valid_dataset=None):
        self.debug: DebugConfig = getattr(config, "debug", None) or DebugConfig()
        self._replaying = self.debug.replay_rollout_data
        self._dumping = self.debug.dump_rollout_data
        self._writer: RecordingWriter | None = None
        self._fetcher: BatchFetcher | None = None
        self._next_record_step = 0
        self._reader: RecordingReader | None = None
        self._verifier: ReplayVerifier | None = None
        self._eval_skip_logged = False
        self._rng_step = 0
        self._rng_warned = False
        self._resume_from: int | None = None
        self._single_controller = is_single_controller()
        self._reaper: WorkerReaper | None = None
        if self.debug.enabled and self._single_controller:
            self._reaper = WorkerReaper()
        if self.debug.deterministic:
            enable_determinism()
        if self._replaying:
            # Fail on a bad path before any model is built.
            self._reader = RecordingReader(self.debug.path)
            self._prepare_replay_config(config)
            if train_dataset is None:
                # PPOTrainer insists on a dataset; replay never reads one.
                train_dataset = []
        try:
            super().__init__(config, train_dataset, valid_dataset)
        except BaseException:
            # No close() follows a failed __init__: end the workers started so far.
            self._reap_workers()
            raise
        self._wrap_stats_commit()
        if self.debug.enabled:
            self._wrap_prepare_batch()
            if self._single_controller:
                self._wrap_clear_batches()
        if self._replaying:
            self._start_replay()
        elif self._dumping:
            self._start_dump()

    def _init_scheduler(self):
        scheduler = super()._init_scheduler()
        if self._reaper is not None:
            self._reaper.watch(scheduler)
        return scheduler

    # -- replay --------------------------------------------------------------------
    def _prepare_replay_config(self, config) -> None:
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
            self._resume_from = checkpoints.latest_before(self.debug.path, target)
        # A replay restores only a checkpoint kept with the recording, never one
        # of an earlier replay left in its own trial.
        mode = "on" if self._resume_from is not None else "disabled"
        if config.recover.mode != mode:
            logger.info(f"Replay: recover.mode={config.recover.mode} read as {mode!r}.")
            config.recover.mode = mode
        end = self.debug.replay_end_step
        if end is not None and (
            config.total_train_steps is None or config.total_train_steps > end + 1
        ):
            logger.info(f"Replay: stopping after step {end} (debug.replay_end_step).")
            config.total_train_steps = end + 1

    def _create_dataloader(self, dataset, dataset_config, rank, world_size):
        if self._replaying and dataset_config is self.config.train_dataset:
            return ReplayDataLoader(self._reader, dp_rank=rank, dp_size=world_size)
        return super()._create_dataloader(dataset, dataset_config, rank, world_size)

    def _init_rollout(self, rollout_config, is_eval=False, lora_path=None):
        if self._replaying:
            if is_eval:
                return None
            # Runs after the engines exist and before PPOTrainer's RecoverHandler.load.
            self.actor.update_weights = self._skip_weight_update
            if self._resume_from is not None:
                self._install_checkpoint(self._resume_from)
            # Single-controller: presented as the rollout controller returns batches.
            present = as_inline_rtensors if self._single_controller else None
            engine = ReplayEngine(self.train_dataloader, present)
            engine.initialize()
            return engine
        allow_sglang_client_without_sglang()
        if self._single_controller and not is_eval:
            engine = self._attach_rollout_controller(rollout_config)
        else:
            engine = None
        if engine is None:
            try:
                engine = super()._init_rollout(
                    rollout_config, is_eval=is_eval, lora_path=lora_path
                )
            except PackageNotFoundError as e:
                if not self.debug.enabled or e.name != "sglang":
                    raise
                raise missing_sglang_error() from e
        if self._dumping and not is_eval:
            if self._single_controller:
                # The fetch of the batch's RTensors runs while the step trains.
                self._fetcher = BatchFetcher()
                record_controller_batches(engine, self._record_batch)
                return engine
            return RecordingEngine(engine, self._record_batch)
        return engine

    def _attach_rollout_controller(self, rollout_config):
        """Single-controller mode with ``AREAL_LLM_SERVER_ADDRS`` set: AReaL's
        rollout controller and workers attach to those running servers (as AReaL's
        own eval rollout does) instead of launching SGLang/vLLM. ``None`` otherwise."""
        if not self.debug.enabled:
            return None
        infos = server_infos_from_env(self.rollout_alloc.parallel.dp_size)
        if infos is None:
            return None
        if rollout_config._version == "v2":
            raise ValueError(
                "Attaching to running inference servers (AREAL_LLM_SERVER_ADDRS) "
                "works with AReaL's rollout controller v1, not rollout._version=v2."
            )
        backend = self.rollout_alloc.backend
        engines = {"sglang": RemoteSGLangEngine, "vllm": RemotevLLMEngine}
        if backend not in engines:
            raise ValueError(
                f"Invalid rollout backend {backend!r}, expected one of {sorted(engines)}."
            )
        config = deepcopy(rollout_config)
        controller = engines[backend].as_controller(config, self.scheduler)
        addrs = ", ".join(f"{i.host}:{i.port}" for i in infos)
        logger.info(f"Rollout workers attach to running inference servers: {addrs}")
        controller.initialize(role="rollout", server_infos=infos)
        return controller

    def _start_replay(self) -> None:
        reader = self._reader
        assert reader is not None
        topology = self._topology(reader)
        if topology["changed"] and _is_rank0():
            logger.warning(describe_topology_change(topology))
        changed = differences(
            reader.manifest.get("determinism", {}), current_settings()
        )
        if changed:
            logger.warning(
                "Determinism settings differ from the dump run's, so the replay may "
                "not be bitwise: " + "; ".join(changed)
            )
        self._verifier = ReplayVerifier(
            reader.path, self.debug.verify_rtol, self.debug.verify_atol, topology
        )

    def _topology(self, reader: RecordingReader) -> dict[str, Any]:
        """The dump run's layout against this replay's: mode, heads, train DP size."""
        layout = reader.manifest.get("layout", {})
        recorded_mode = layout.get("mode", "spmd")
        recorded_dp = layout.get("train_dp_size", reader.num_shards)
        replay = self._layout()
        topology = {
            "recorded_mode": recorded_mode,
            "replay_mode": replay["mode"],
            "recorded_heads": reader.num_shards,
            "replay_heads": replay["num_shards"],
            "recorded_train_dp": recorded_dp,
            "replay_train_dp": replay["train_dp_size"],
        }
        topology["changed"] = (
            recorded_mode != replay["mode"]
            or reader.num_shards != replay["num_shards"]
            or recorded_dp != replay["train_dp_size"]
        )
        return topology

    def _checkpoint_names(self) -> list[str]:
        return ["default"] + (["critic"] if self.config.critic is not None else [])

    def _install_checkpoint(self, step: int) -> None:
        if _is_rank0():
            checkpoints.install(
                self.config,
                self.debug.path,
                step,
                self._checkpoint_names(),
                dist.get_world_size(),
            )
        dist.barrier(group=self.actor.cpu_group)
        logger.info(
            f"Replay: restoring the dump run's recover checkpoint of step {step} "
            f"(kept with the recording) to start at step {step + 1}."
        )

    def _save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int):
        before = self.recover_handler.last_step_info.global_step
        super()._save_recover_checkpoint(epoch, epoch_step, global_step)
        saved = self.recover_handler.last_step_info.global_step == global_step != before
        if self._dumping and saved:
            # AReaL overwrites its one recover checkpoint at the next save; a
            # replay of step N needs the one before N, so a copy stays with the
            # recording.
            if _is_rank0():
                checkpoints.keep(
                    self.config, self.debug.path, global_step, self._checkpoint_names()
                )
            dist.barrier(group=self.actor.cpu_group)

    def _skip_weight_update(self, meta) -> None:
        # Nothing receives weights in replay; saving them each step would only cost time.
        pass

    def _evaluate(
        self, eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
    ):
        if not self._replaying:
            return super()._evaluate(
                eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
            )
        if not self._eval_skip_logged and eval_workflow is not None:
            logger.info("Replay: evaluation rollouts skipped (no inference engine).")
            self._eval_skip_logged = True

    def _ensure_proxy_started(self) -> None:
        if not self._replaying:
            super()._ensure_proxy_started()

    # -- dump ------------------------------------------------------------------------
    def _start_dump(self) -> None:
        if _is_rank0():
            write_manifest(self.debug.path, self._manifest())
        logger.info(f"Recording rollout batches to {self.debug.path}")

    def _layout(self) -> dict[str, Any]:
        """How this run's batches are produced: one shard per DP head (SPMD) or
        one per step on the controller (single-controller)."""
        train_dp = self.actor_alloc.parallel.dp_size
        if self._single_controller:
            return {
                "mode": "single-controller",
                "world_size": self.actor_alloc.parallel.world_size,
                "num_shards": 1,
                "train_dp_size": train_dp,
            }
        return {
            "mode": "spmd",
            "world_size": dist.get_world_size() if dist.is_initialized() else 1,
            "num_shards": self.actor.data_parallel_world_size,
            "train_dp_size": train_dp,
        }

    def _manifest(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "areal_debug_version": pkg_version("areal-debug"),
            "areal_version": pkg_version("areal"),
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "created": datetime.datetime.now(datetime.UTC).isoformat(),
            "experiment_name": self.config.experiment_name,
            "trial_name": self.config.trial_name,
            "layout": {
                **self._layout(),
                "steps_per_epoch": len(self.train_dataloader),
                "actor_backend": self.config.actor.backend,
                "rollout_backend": self.config.rollout.backend,
            },
            "determinism": current_settings(),
            "config": json.loads(
                json.dumps(dataclasses.asdict(self.config), default=str)
            ),
        }

    def _record_batch(self, batch) -> None:
        if self._writer is None:
            self._writer = RecordingWriter(
                self.debug.path,
                shard=self.actor.data_parallel_rank,
                num_shards=self.actor.data_parallel_world_size,
                steps_per_epoch=len(self.train_dataloader),
                max_pending=self.debug.max_pending_steps,
                # Single-controller batches arrive as fresh fetched copies.
                clone_tensors=_trains_on_cpu() and self._fetcher is None,
            )
        step = self._next_record_step
        self._next_record_step += 1
        if self._fetcher is not None:
            batch = self._fetcher.submit(batch)
        self._writer.submit_batch(step, batch)

    # -- both ------------------------------------------------------------------------
    def _wrap_stats_commit(self) -> None:
        commit = self.stats_logger.commit

        def commit_and_capture(epoch, step, global_step, data):
            if _is_rank0() and isinstance(data, dict):
                self._on_step_stats(global_step, data)
            return commit(epoch, step, global_step, data)

        self.stats_logger.commit = commit_and_capture

    def _on_step_stats(self, global_step: int, data: dict) -> None:
        stats, timings = training_stats(data), timing_stats(data)
        if self._dumping:
            if self._writer is not None:
                rollout = inference_stats(data)
                self._writer.submit_stats(global_step, stats, timings, rollout)
        elif self._replaying:
            assert self._verifier is not None and self._reader is not None
            recorded = self._reader.recorded_stats(global_step)
            if recorded is not None:
                recorded = training_stats(recorded)
            entry = self._verifier.add(global_step, recorded, stats, timings)
            self._write_report()
            if entry["status"] == "diverged":
                first = self._verifier.first_divergence()
                msg = (
                    f"Replay step {global_step} diverged from the recording "
                    f"(first divergence: step {first['global_step']}, metric "
                    f"{first['metric']}, recorded {first['recorded']!r}, replayed "
                    f"{first['replayed']!r}); report: {self.replay_report_path}"
                )
                if self.debug.fail_on_divergence:
                    raise RecordingError(msg + ". Stopping (debug.fail_on_divergence).")
                logger.warning(msg)

    def _start_step(self) -> int:
        if self.recover_info is not None:
            return self.recover_info.last_step_info.next().global_step
        return 0

    def _end_step(self, total_epochs: int | None) -> int:
        epochs = (
            total_epochs if total_epochs is not None else self.config.total_train_epochs
        )
        end = epochs * len(self.train_dataloader)
        if self.config.total_train_steps is not None:
            end = min(end, self.config.total_train_steps)
        return end

    def train(
        self, workflow=None, eval_workflow=None, *args, total_epochs=None, **kwargs
    ):
        start = self._start_step()
        self._rng_step = start
        if self._replaying:
            assert self._reader is not None
            self._reader.require_steps(range(start, self._end_step(total_epochs)))
            self._announce_start(start)
            if workflow is None:
                workflow = _NeverRunWorkflow()
        elif self._dumping:
            if _is_rank0():
                supersede_steps(self.debug.path, start)
            dist.barrier(group=self.actor.cpu_group)
            self._next_record_step = start
        try:
            return super().train(
                workflow, eval_workflow, *args, total_epochs=total_epochs, **kwargs
            )
        finally:
            self._finish_recording()
            if self._replaying and _is_rank0() and self._verifier is not None:
                for line in self._verifier.summary_lines():
                    logger.info(line)

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

    def _wrap_clear_batches(self) -> None:
        """AReaL's ``clear_batches`` at step end drops the workers' copies of the
        batch: a dump's background fetch must be done by then, and a replay's
        inline RTensors, stored on no worker, are left out."""
        clear = self.actor.clear_batches

        def clear_batches(*targets):
            if self._fetcher is not None:
                self._fetcher.wait()
            return clear(*(without_inline_rtensors(t) for t in targets))

        self.actor.clear_batches = clear_batches

    # -- RNG states at the dump point -------------------------------------------------
    def _wrap_prepare_batch(self) -> None:
        """Capture (dump) or restore (replay) every rank's RNG states right after
        the step's batch is ready: the point where rollout ends and training begins."""
        prepare = self.actor.prepare_batch

        def prepare_and_sync_rng(*args, **kwargs):
            batch = prepare(*args, **kwargs)
            step = self._rng_step
            self._rng_step += 1
            if self._single_controller:
                self._note_no_rng_in_single_controller()
            elif self._dumping:
                self._record_rng(step)
            elif self.debug.restore_rng:
                self._restore_rng(step)
            return batch

        self.actor.prepare_batch = prepare_and_sync_rng

    def _note_no_rng_in_single_controller(self) -> None:
        # The training randomness lives in the RPC workers, out of the
        # controller's reach; their seeding and call sequence are the same in
        # dump and replay, so a same-mode replay needs no restore.
        if self._rng_warned:
            return
        self._rng_warned = True
        if self._replaying and self.debug.restore_rng:
            logger.info(
                "Replay: RNG states are not restored in single-controller mode "
                "(the train workers seed themselves as in the dump run)."
            )

    def _record_rng(self, step: int) -> None:
        world = dist.get_world_size()
        gathered: list = [None] * world
        dist.all_gather_object(
            gathered, rng_state.capture(), group=self.actor.cpu_group
        )
        if _is_rank0() and self._writer is not None:
            self._writer.submit_rng(step, gathered)

    def _restore_rng(self, step: int) -> None:
        assert self._reader is not None
        recorded = self._reader.recorded_rng(step)
        world = dist.get_world_size()
        problem = None
        if recorded is None:
            problem = "the recording has no RNG states for this step"
        elif recorded["world_size"] != world:
            problem = (
                f"it was recorded by {recorded['world_size']} processes, this replay "
                f"has {world}"
            )
        if problem is not None:
            if not self._rng_warned and _is_rank0():
                logger.warning(
                    f"Replay: RNG states not restored at step {step} ({problem}); "
                    "training-side randomness (dropout) may differ."
                )
                self._rng_warned = True
            return
        rng_state.restore(recorded["ranks"][dist.get_rank()])

    def _finish_recording(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _write_report(self) -> None:
        atomic_write_json(self.replay_report_path, self._verifier.report())

    @property
    def replay_report_path(self) -> str:
        return os.path.join(
            StatsLogger.get_log_path(self.config.stats_logger), REPORT_NAME
        )

    def close(self):
        try:
            if self._fetcher is not None:
                self._fetcher.close()
            if self._writer is not None:
                self._writer.close()
        finally:
            try:
                super().close()
            finally:
                self._reap_workers()

    def _reap_workers(self) -> None:
        if self._reaper is not None:
            self._reaper.reap()
