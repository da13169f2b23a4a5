# SPDX-License-Identifier: Apache-2.0
"""Where a run's batches come from: SPMD processes or a single controller.

Everything dump and replay do differently in AReaL's two modes lives here,
chosen once per run. SPMD: every process trains, data-parallel heads produce
one shard each, rank 0 coordinates. Single-controller (``scheduler.type:
local``): the trainer process is a controller, one shard per step holding
RTensors, RPC workers that must end with it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch.distributed as dist

from areal_debug import areal_compat
from areal_debug.logs import get_logger
from areal_debug.modes import rng_state
from areal_debug.modes.engines import RecordingEngine
from areal_debug.recording.manifest import SINGLE_CONTROLLER, SPMD, Layout
from areal_debug.single_controller.rtensor_bridge import (
    BatchFetcher,
    as_inline_rtensors,
    inline_rtensors,
    without_inline_rtensors,
)
from areal_debug.single_controller.server_attach import (
    attach_rollout_controller,
    attach_teacher_controller,
)
from areal_debug.single_controller.watched_engines import (
    WATCHED,
    take_rollout_failures,
)
from areal_debug.single_controller.worker_reaper import WorkerReaper
from areal_debug.stages.blame import SampleBlame
from areal_debug.stages.probes import StageProbes
from areal_debug.stages.recorded_ref_logp import RecordedRefLogp

logger = get_logger("DebugTopology")

Batch = list[dict[str, Any]]


class Topology:
    name: str
    # AReaL's evaluation engine is a worker process of its own (single controller),
    # not an object in the trainer's process.
    eval_engine_is_a_worker = False

    def layout(self, trainer) -> Layout:
        raise NotImplementedError

    def is_coordinator(self) -> bool:
        """The one process that writes shared files and logs summaries."""
        return True

    def barrier(self, trainer) -> None:
        pass

    def process_count(self) -> int:
        """Processes of this trainer (AReaL saves one dataloader state each)."""
        return dist.get_world_size() if dist.is_initialized() else 1

    def watch_scheduler(self, scheduler) -> None:
        pass

    def end_workers(self) -> None:
        pass

    def attach_rollout(self, trainer, rollout_config) -> Any | None:
        """An inference engine attached to running servers, or None."""
        return None

    def building_rollout(self) -> AbstractContextManager:
        """Around the build of the rollout engine a dump records from: where its
        workflows run in other processes, have them note the requests they fail on."""
        return nullcontext()

    def worker_rollout_failures(self, trainer) -> list[str]:
        """The coordinator, at a step's end: the requests that failed in rollout
        workers since the last call (none where the workflows run in this process)."""
        return []

    def record_engine(self, engine, on_batch: Callable, patches, failures=None) -> Any:
        """Make ``engine`` hand each batch it returns to ``on_batch`` (and, where
        its workflows run in this process, each request they fail on to
        ``failures``, a ``RolloutFailures``)."""
        raise NotImplementedError

    def present_replayed(self, batch: Batch) -> Batch:
        """A recorded batch as this mode's inference side returns it."""
        return batch

    # A teacher served as an inference engine (teacher.engine_type=rollout).
    records_teacher = False

    def attach_teacher(self, trainer, rollout_config) -> Any | None:
        """The teacher's engine attached to running servers, or None."""
        return None

    def record_teacher(self, engine, on_logps: Callable, patches) -> Any:
        """Make the teacher ``engine`` hand each ``compute_logp`` result to ``on_logps``."""
        return engine

    def present_replayed_values(self, values: list) -> list:
        """Recorded tensors as this mode's inference side returns them."""
        return values

    def patch_actor(self, trainer, patches) -> None:
        pass

    def close(self) -> None:
        """Finish background work (before the recording is closed)."""

    def clone_recorded_tensors(self) -> bool:
        return True

    def capture_rng(self, trainer) -> list | None:
        """Every rank's RNG states (on the coordinator), None if not applicable."""
        return None

    def restore_rng(self, recorded: dict | None, step: int) -> str | None:
        """Restore this rank's states; return why not (None when restored)."""
        return None

    def gather_reasons(self, trainer, local: list[str]) -> list[str]:
        """Every process's ``local`` reasons, on the coordinator (a collective
        where there are several processes: every process calls it)."""
        return local

    def start_stage_probes(
        self, trainer, patches, worker_probes, keep: frozenset[str], recorded_ref: bool
    ) -> Any | None:
        """Start digesting the stages where the engines train; the probes to
        gather from, None when there are none. ``keep``: the stages kept in full;
        ``recorded_ref``: the reference's recorded log-probs stand in for its
        forward pass."""
        return None

    def start_blame(self, trainer, patches, worker_probes) -> Any | None:
        """Start the blame passes (debug.blame_steps) where the actor trains: a
        ``SampleBlame`` or its handle (``on``, ``take``); None where this mode has
        none (said why)."""
        logger.warning(
            f"debug.blame_steps is not available in {self.name} mode. The run "
            "goes on without it."
        )
        return None

    def gather_blame(self, trainer, blame) -> list | None:
        """Every rank's parts of the step on the coordinator (None elsewhere)."""
        return None

    def hand_over_ref_logp(self, probes, step: int, tensors: dict) -> None:
        """Give the reference engines the step's recorded log-probs."""

    def digest_layers(self, probes, on: bool) -> None:
        """Whether the actor's engines digest its layers from this step on."""

    def gather_stages(self, trainer, probes) -> list | None:
        """Every rank's ``StageRecord`` of the step on the coordinator (None
        elsewhere)."""
        return None

    def digest_model(self, trainer, probes) -> list | None:
        """Every rank's digests of the actor's weights as the first step starts
        (``StageProbes.digest_model``) on the coordinator (None elsewhere, or
        where a rank's failed)."""
        return None


class SpmdTopology(Topology):
    name = SPMD

    def layout(self, trainer) -> Layout:
        return Layout(
            mode=SPMD,
            world_size=dist.get_world_size() if dist.is_initialized() else 1,
            num_shards=trainer.actor.data_parallel_world_size,
            train_dp_size=areal_compat.train_dp_size(trainer),
            steps_per_epoch=len(trainer.train_dataloader),
        )

    def is_coordinator(self) -> bool:
        return not dist.is_initialized() or dist.get_rank() == 0

    def barrier(self, trainer) -> None:
        dist.barrier(group=areal_compat.cpu_group(trainer))

    def record_engine(self, engine, on_batch, patches, failures=None):
        # Each data-parallel head's engine: record what it returns.
        return RecordingEngine(engine, on_batch, failures, patches)

    def clone_recorded_tensors(self) -> bool:
        # On an accelerator AReaL copies the batch to the device before any use
        # (dist_rollout.tensor_container_to), so the host tensors the engine
        # returned stay untouched and need no clone; on CPU that .to() returns
        # the same tensors.
        return areal_compat.trains_on_cpu()

    def capture_rng(self, trainer) -> list | None:
        return self._gather(trainer, rng_state.capture())

    def start_stage_probes(self, trainer, patches, worker_probes, keep, recorded_ref):
        # The engines train in this process.
        probes = StageProbes(keep, RecordedRefLogp() if recorded_ref else None)
        probes.install(trainer, patches)
        return probes

    def start_blame(self, trainer, patches, worker_probes) -> SampleBlame:
        blame = SampleBlame(areal_compat.stage_engines(trainer)["actor"])
        blame.install(patches)
        return blame

    def gather_blame(self, trainer, blame: SampleBlame) -> list | None:
        return self._gather(trainer, blame.take())

    def hand_over_ref_logp(self, probes, step: int, tensors: dict) -> None:
        probes.recorded_ref.hand_over(step, tensors)

    def digest_layers(self, probes, on: bool) -> None:
        probes.layers = on

    def gather_stages(self, trainer, probes) -> list | None:
        return self._gather(trainer, probes.take())

    def digest_model(self, trainer, probes) -> list | None:
        gathered = self._gather(trainer, probes.digest_model(trainer.actor))
        return None if gathered is None or None in gathered else gathered

    def gather_reasons(self, trainer, local: list[str]) -> list[str]:
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return local
        # A rollout fails on one head's engine; only the coordinator pins.
        gathered = self._gather(trainer, local) or []
        return [
            f"rank {rank}: {reason}"
            for rank, reasons in enumerate(gathered)
            for reason in reasons
        ]

    def _gather(self, trainer, local: Any) -> list | None:
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, local, group=areal_compat.cpu_group(trainer))
        return gathered if self.is_coordinator() else None

    def restore_rng(self, recorded: dict | None, step: int) -> str | None:
        world = dist.get_world_size()
        if recorded is None:
            return "the recording has no RNG states for this step"
        if recorded["world_size"] != world:
            return (
                f"it was recorded by {recorded['world_size']} processes, this "
                f"replay has {world}"
            )
        rng_state.restore(recorded["ranks"][dist.get_rank()])
        return None


class SingleControllerTopology(Topology):
    name = SINGLE_CONTROLLER
    eval_engine_is_a_worker = True

    def __init__(self):
        self.reaper = WorkerReaper()
        # Dump only: fetches each batch's RTensors while the step trains.
        self.fetcher: BatchFetcher | None = None
        self._rng_noted = False

    def layout(self, trainer) -> Layout:
        return Layout(
            mode=SINGLE_CONTROLLER,
            world_size=areal_compat.train_world_size(trainer),
            num_shards=1,
            train_dp_size=areal_compat.train_dp_size(trainer),
            steps_per_epoch=len(trainer.train_dataloader),
        )

    def watch_scheduler(self, scheduler) -> None:
        self.reaper.watch(scheduler)

    def end_workers(self) -> None:
        self.reaper.reap()

    def attach_rollout(self, trainer, rollout_config):
        return attach_rollout_controller(trainer, rollout_config)

    def building_rollout(self) -> AbstractContextManager:
        # The workflows run in the rollout workers: they build AReaL's engine
        # class noting failed requests (watched_engines), asked at each step's end.
        return areal_compat.watch_rollout_workers(WATCHED)

    def worker_rollout_failures(self, trainer) -> list[str]:
        return take_rollout_failures(trainer.rollout)

    def record_engine(self, engine, on_batch, patches, failures=None):
        # The methods are replaced on the instance, not wrapped in another
        # object: AReaL checks isinstance(trainer.rollout, RolloutController).
        # The workflows run in the rollout workers (``failures`` unused: see
        # ``worker_rollout_failures``).
        fetcher = self._fetcher()
        for name in ("prepare_batch", "rollout_batch"):

            def make(original):
                def recorded(*args, **kwargs):
                    batch = original(*args, **kwargs)
                    # The writer awaits the fetched copy on its own thread.
                    on_batch(fetcher.submit(batch))
                    return batch

                return recorded

            patches.wrap(engine, name, make)
        return engine

    def present_replayed(self, batch: Batch) -> Batch:
        return as_inline_rtensors(batch)

    records_teacher = True

    def attach_teacher(self, trainer, rollout_config):
        return attach_teacher_controller(trainer, rollout_config)

    def record_teacher(self, engine, on_logps, patches):
        # The teacher's RolloutController returns RTensors held by its workers,
        # fetched like the batch, before the step's clear_batches.
        def make(compute_logp):
            def recorded(data):
                logps = compute_logp(data)
                on_logps(self._fetcher().submit(logps))
                return logps

            return recorded

        patches.wrap(engine, "compute_logp", make)
        return engine

    def present_replayed_values(self, values: list) -> list:
        return inline_rtensors(values)

    def _fetcher(self) -> BatchFetcher:
        if self.fetcher is None:
            self.fetcher = BatchFetcher()
        return self.fetcher

    def start_stage_probes(self, trainer, patches, worker_probes, keep, recorded_ref):
        # The engines train in the RPC workers, built as probed classes.
        if not worker_probes.controllers:
            return None
        worker_probes.start(keep, recorded_ref)
        return worker_probes

    def hand_over_ref_logp(self, probes, step: int, tensors: dict) -> None:
        probes.hand_over_ref_logp(step, tensors)

    def start_blame(self, trainer, patches, worker_probes):
        # The actor trains in the RPC workers: the passes run there, around the
        # probed engine's train_batch, as in an SPMD process.
        blame = worker_probes.start_blame()
        if blame is None:
            logger.warning(
                "debug.blame_steps: the actor's workers build no probed FSDP "
                "engine (it trains with another engine class), so no sample's "
                "part is computed. The run goes on without it."
            )
        return blame

    def gather_blame(self, trainer, blame) -> list | None:
        return blame.take()

    def digest_layers(self, probes, on: bool) -> None:
        probes.digest_layers(on)

    def gather_stages(self, trainer, probes) -> list | None:
        return probes.take()

    def digest_model(self, trainer, probes) -> list | None:
        return probes.digest_model()

    def patch_actor(self, trainer, patches) -> None:
        """AReaL's ``clear_batches`` at step end drops the workers' copies of the
        batch: a dump's background fetch must be done by then, and a replay's
        inline RTensors, stored on no worker, are left out."""

        def make(clear):
            def clear_batches(*targets):
                if self.fetcher is not None:
                    self.fetcher.wait()
                return clear(*(without_inline_rtensors(t) for t in targets))

            return clear_batches

        patches.wrap(trainer.actor, "clear_batches", make)

    def clone_recorded_tensors(self) -> bool:
        # Batches arrive as fresh fetched copies.
        return False

    def close(self) -> None:
        if self.fetcher is not None:
            self.fetcher.close()

    def restore_rng(self, recorded: dict | None, step: int) -> str | None:
        # The training randomness lives in the RPC workers, out of the
        # controller's reach; their seeding and call sequence are the same in
        # dump and replay, so a same-mode replay needs no restore.
        if not self._rng_noted:
            self._rng_noted = True
            logger.info(
                "Replay: RNG states are not restored in single-controller mode "
                "(the train workers seed themselves as in the dump run)."
            )
        return None


def choose_topology() -> Topology:
    if areal_compat.single_controller_mode():
        return SingleControllerTopology()
    return SpmdTopology()
