# SPDX-License-Identifier: Apache-2.0
"""What the training thread hands the recording's writer thread: one typed job per
file of a step, written in the order queued, and the queue that bounds them."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from areal_debug.logs import get_logger
from areal_debug.recording.writer.snapshot import PendingCopy

# One logger object for all the writer's modules: AReaL's getLogger returns a new
# one on every call, and tests hook this one.
logger = get_logger("DebugDump")


@dataclass(frozen=True, slots=True)
class Job:
    """A step's file for the writer thread to write."""

    step: int
    # What a stop marker says the head was writing (a key of
    # format.STOPPED_WRITING): on-disk strings.
    writing: ClassVar[str]
    # Whether it takes one of the queue's places for a step's batch.
    holds_batch_slot: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class BatchJob(Job):
    """The head's shard of the step: its snapshot, or a ``Future`` of a fetched
    batch (awaited on the writer thread)."""

    batch: list[dict[str, Any]] | PendingCopy | Future
    writing: ClassVar[str] = "batch"
    holds_batch_slot: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class TeacherLogpJob(Job):
    """The teacher's log-probs, one tensor per trajectory (or a ``Future`` of them)."""

    logps: list[torch.Tensor] | Future
    writing: ClassVar[str] = "teacher"


@dataclass(frozen=True, slots=True)
class RngJob(Job):
    """Every rank's RNG states at the step's dump point."""

    states: list[dict[str, Any]]
    writing: ClassVar[str] = "rng"


@dataclass(frozen=True, slots=True)
class StagesJob(Job):
    """The step's stage digests, and its per-token stage tensors when kept."""

    stages: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    writing: ClassVar[str] = "stages"


@dataclass(frozen=True, slots=True)
class StatsJob(Job):
    """The step's committed statistics: training, timings, inference side."""

    stats: dict[str, float]
    timings: dict[str, float]
    rollout: dict[str, float]
    writing: ClassVar[str] = "stats"


@dataclass(frozen=True, slots=True)
class PinJob(Job):
    """Steps to keep (never deleted) because this one was anomalous."""

    reasons: list[str]
    pinned: list[int]
    writing: ClassVar[str] = "pin"


@dataclass(frozen=True, slots=True)
class Close:
    """The last job: the writer thread ends once it is taken."""

    holds_batch_slot: ClassVar[bool] = False


class JobQueue:
    """The writer thread's jobs, in order, with back-pressure on batches: at most
    ``max_pending`` steps' batches wait in memory, and queueing one more waits for
    the writer (logged). Every other job queues at once."""

    def __init__(self, max_pending: int):
        self._queue: queue.Queue[Job | Close] = queue.Queue()
        # Counts steps (their batches, which hold the memory), not jobs: a bound
        # on jobs made training wait on a step's statistics while its batch was
        # still being written.
        self._batch_slots = threading.Semaphore(max_pending)
        self._waits, self._waited = 0, 0.0

    def put(self, job: Job | Close) -> None:
        if job.holds_batch_slot and not self._batch_slots.acquire(blocking=False):
            t0 = time.monotonic()
            self._batch_slots.acquire()
            self._waited_for_writer(time.monotonic() - t0)
        self._queue.put(job)

    def get(self) -> Job | Close:
        return self._queue.get()

    def done(self, job: Job | Close) -> None:
        """``job`` is written (or dropped): its place is free."""
        if job.holds_batch_slot:
            self._batch_slots.release()
        self._queue.task_done()

    def join(self) -> None:
        """Wait until every job queued is done."""
        self._queue.join()

    @property
    def unfinished_tasks(self) -> int:
        return self._queue.unfinished_tasks

    def _waited_for_writer(self, seconds: float) -> None:
        self._waits += 1
        self._waited += seconds
        # Once, then now and then: a disk that is slower than training stays so.
        if self._waits == 1 or self._waits % 50 == 0:
            logger.warning(
                f"Training waited {seconds:.2f}s for the recording writer "
                f"({self._waits} time(s) so far, {self._waited:.1f}s in all): the "
                "disk is slower than training. Raise debug.max_pending_steps to "
                "buffer more steps in memory, or record fewer (debug.record_every)."
            )
