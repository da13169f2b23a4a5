# SPDX-License-Identifier: Apache-2.0
"""Writing a recording: a snapshot on the training thread, all I/O on a writer thread
(payloads stored by the writer process, ``writer.process``)."""

from __future__ import annotations

import atexit
import threading
import weakref
from concurrent.futures import Future
from typing import Any

import torch

from areal_debug.recording import retention
from areal_debug.recording.format import (
    DEFAULT_ZSTD_LEVEL,
    DEFAULT_ZSTD_THREADS,
    Codec,
    RecordingError,
)
from areal_debug.recording.writer.jobs import (
    BatchJob,
    Close,
    Job,
    JobQueue,
    PinJob,
    RngJob,
    StagesJob,
    StatsJob,
    TeacherLogpJob,
    logger,
)
from areal_debug.recording.writer.router import PayloadRouter
from areal_debug.recording.writer.snapshot import Snapshotter, snapshot_value
from areal_debug.recording.writer.step_batch import StepBatch
from areal_debug.recording.writer.step_files import Retainer, StepFiles
from areal_debug.recording.writer.stop_marker import StopMarker


class WriterThread:
    """The writer thread: takes jobs in order and has them written. The first
    failure stops the recording, not the training: the stop marker says where
    and why, and every later job is dropped."""

    def __init__(self, jobs: JobQueue, files: StepFiles, marker: StopMarker, name: str):
        self._jobs = jobs
        self._files = files
        self._marker = marker
        self.error: BaseException | None = None
        # (step, error) once the writer has stopped.
        self.stopped: tuple[int, BaseException] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def join(self) -> None:
        """End after the jobs queued so far (a ``Close`` must be queued)."""
        self._thread.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if isinstance(job, Close):
                    return
                if self.error is None:
                    self._files.write(job)
            except BaseException as e:  # noqa: BLE001 - surfaced on the training thread
                self.error = e
                try:
                    self.stopped = (job.step, e)
                    complete = self._files.complete(job.step)
                    self._marker.write(job.step, e, job.writing, complete)
                except Exception as report_error:  # noqa: BLE001
                    # The thread must live on: flush() and close() wait for it.
                    logger.error(f"Recording writer failed: {e!r} ({report_error!r})")
            finally:
                self._jobs.done(job)


class RecordingWriter:
    """Writes one data-parallel head's shards (and rank 0's stats) in the background.

    ``submit_*`` only enqueue; at most ``max_pending`` steps' batches wait in
    memory, after which submitting a batch waits for the writer (back-pressure,
    logged). A step's small files (statistics, RNG states, stage digests) never
    wait: they queue behind its batch.
    ``close()`` (also run at interpreter exit) writes everything still queued.

    A write failure (disk full, permission lost, any error) stops the recording,
    not the training: the writer logs one error, writes ``stopped-shard-N.json``
    (the step, the error) if it still can, and drops what follows. With
    ``fatal_errors`` the error is raised on the training thread instead.
    """

    def __init__(
        self,
        path: str,
        *,
        shard: int,
        num_shards: int,
        steps_per_epoch: int,
        max_pending: int = 2,
        clone_tensors: bool = True,
        records_teacher: bool = False,
        compression: str = Codec.ZSTD,
        compression_level: int = DEFAULT_ZSTD_LEVEL,
        compression_threads: int = DEFAULT_ZSTD_THREADS,
        fatal_errors: bool = False,
        retention_policy: retention.RetentionPolicy | None = None,
        writer_process: bool = True,
    ):
        self.path = path
        self.shard = shard
        self.fatal_errors = fatal_errors
        self.clone_tensors = clone_tensors
        self._snapshots = Snapshotter(clone_tensors)
        # Started first: the writer process imports torch while training starts.
        self._payloads = PayloadRouter(
            path,
            Codec(compression),
            compression_level,
            compression_threads,
            writer_process,
        )
        self._queue = JobQueue(max_pending)
        self._closed = False
        self._marker = StopMarker(path, shard, fatal_errors)
        # Only the coordinator's writer (the one that writes stats) deletes.
        retainer = None
        if retention_policy is not None:
            retainer = Retainer(path, retention_policy)
        files = StepFiles(
            path,
            shard=shard,
            num_shards=num_shards,
            steps_per_epoch=steps_per_epoch,
            records_teacher=records_teacher,
            payloads=self._payloads,
            snapshots=self._snapshots,
            retainer=retainer,
        )
        name = f"areal-debug-writer-{shard}"
        self._thread = WriterThread(self._queue, files, self._marker, name)
        self._step_batch = StepBatch(self.submit_batch)
        _live_writers.add(self)

    @property
    def stopped(self) -> tuple[int, BaseException] | None:
        """(step, error) once the writer has stopped."""
        return self._thread.stopped

    # -- training thread -----------------------------------------------------
    def submit_batch(
        self, global_step: int, batch: list[dict[str, Any]] | Future
    ) -> None:
        """Queue a step's batch. A ``Future`` of one (fetched on another thread,
        into fresh tensors) is awaited on the writer thread."""
        if not isinstance(batch, Future):
            batch = self._snapshots.take(batch, copier=not self._reads_memory())
        self._put(BatchJob(global_step, batch))

    def submit_batch_part(
        self, global_step: int, part: list[dict[str, Any]] | Future
    ) -> None:
        """Queue what one ``prepare_batch`` call of the step returned: the step's
        parts are recorded once, as the batch it trains, when sealed."""
        self._step_batch.add(global_step, part)

    def seal_batch(self) -> None:
        """The open step's batch is complete (its statistics commit)."""
        self._step_batch.seal()

    def _reads_memory(self) -> bool:
        """Whether the writer process reads payloads out of this process."""
        return self._payloads.reads_memory

    def submit_teacher_logp(
        self, global_step: int, logps: list[torch.Tensor] | Future
    ) -> None:
        """Queue the teacher's log-probs of the step's batch, one tensor per
        trajectory in batch order (or a ``Future`` of the fetched list)."""
        if not isinstance(logps, Future):
            logps = snapshot_value(list(logps), self.clone_tensors, ("teacher_logp",))
        self._put(TeacherLogpJob(global_step, logps))

    def submit_stats(
        self,
        global_step: int,
        stats: dict[str, float],
        timings: dict[str, float] | None = None,
        rollout: dict[str, float] | None = None,
    ) -> None:
        """Queue the step's committed statistics: training, timings, inference side."""
        job = StatsJob(
            global_step, dict(stats), dict(timings or {}), dict(rollout or {})
        )
        self._put(job)

    def submit_rng(self, global_step: int, states: list[dict[str, Any]]) -> None:
        """Queue every rank's RNG states at the step's dump point (global rank 0)."""
        self._put(RngJob(global_step, list(states)))

    def submit_stages(
        self,
        global_step: int,
        stages: dict[str, Any],
        tensors: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Queue the step's stage digests (all ranks', merged), and the per-token
        stage tensors when kept; written before the step's statistics."""
        self._put(StagesJob(global_step, stages, dict(tensors or {})))

    def submit_pin(self, global_step: int, reasons: list[str], pins: list[int]) -> None:
        """Pin ``pins`` (never deleted) because ``global_step`` was anomalous."""
        self._put(PinJob(global_step, list(reasons), pins))

    def flush(self) -> None:
        """Block until everything submitted is on disk; raise if writing failed."""
        self.seal_batch()  # the writer would wait for parts no call brings
        self._queue.join()
        self._raise_if_failed()

    def close(self) -> None:
        if self._closed:
            return
        self.seal_batch()
        self._closed = True
        self._queue.put(Close())
        self._thread.join()
        self._snapshots.close()
        self._marker.release()
        _live_writers.discard(self)
        self._raise_if_failed()

    def _put(self, job: Job) -> None:
        self._raise_if_failed()
        if self._closed:
            raise RecordingError(
                "The recording writer is closed; nothing more can be recorded."
            )
        if self.stopped is not None:
            return  # the recording stopped; training goes on without it
        self._queue.put(job)

    def _raise_if_failed(self) -> None:
        error = self._thread.error
        if error is not None and self.fatal_errors:
            raise RecordingError(
                f"Writing the recording to {self.path} failed: {error!r}. "
                "Steps recorded before the failure are intact; fix the cause "
                "(disk space, permissions) and resume the run."
            ) from error


_live_writers: weakref.WeakSet[RecordingWriter] = weakref.WeakSet()


@atexit.register
def _close_live_writers() -> None:
    # A script that never calls trainer.close() must not lose queued steps.
    for writer in list(_live_writers):
        try:
            writer.close()
        except Exception as e:  # noqa: BLE001
            logger.error(f"Recording writer for {writer.path} failed at exit: {e!r}")
