# SPDX-License-Identifier: Apache-2.0
"""Writing a recording: a snapshot on the training thread, all I/O on a writer thread
(payloads stored by the writer process, ``payload_process``)."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import json
import os
import queue
import shutil
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any

import torch
from areal.utils import logging

from areal_debug.recording import payload_process, retention
from areal_debug.recording.atomic import atomic_write_json, read_json
from areal_debug.recording.format import (
    ANOMALY,
    DEFAULT_ZSTD_LEVEL,
    DEFAULT_ZSTD_THREADS,
    FORMAT_VERSION,
    KEPT,
    MANIFEST,
    RNG,
    STAGE_TENSORS,
    STAGES_FILE,
    STATS,
    STEP_META,
    STOPPED_WRITING,
    TEACHER_LOGP_META,
    TEMPORARY_PREFIX,
    RecordingError,
    complete_step_dirs,
    dir_bytes,
    kept_steps,
    list_step_dirs,
    reserved_marker,
    reserved_marker_name,
    shard_meta_name,
    shard_payload_name,
    step_dirname,
    stop_consequence,
    stopped_marker_name,
    teacher_payload_name,
)
from areal_debug.recording.manifest import Manifest
from areal_debug.recording.packed_payload import is_packed, pack, plan
from areal_debug.recording.payload_process import (
    MemoryNotReadable,
    WriterProcessUnavailable,
    describe_packed,
    save_payload,
)
from areal_debug.recording.snapshot import (
    ChangedInPlace,
    PendingCopy,
    Snapshotter,
    snapshot_batch,
    snapshot_value,
)

logger = logging.getLogger("DebugDump")


RESERVED_BYTES = 4096


def _reserve_space(path: str, marker: str) -> None:
    """Allocate room for a stop marker now, for when the disk is full later. A
    marker an earlier run left in the reservation (its directory had turned
    read-only) is first given its own name, so it is not overwritten."""
    # Best effort, like the reservation itself: a writer that cannot write is
    # stopped by its first write, never by its start.
    with contextlib.suppress(OSError, RecordingError):
        if reserved_marker(path) is not None:
            os.replace(path, marker)
    with contextlib.suppress(OSError):
        with open(path, "wb") as f:
            f.write(b" " * RESERVED_BYTES)
            f.flush()
            os.fsync(f.fileno())


def _write_into_reserve(reserve: str, marker: str, obj: dict) -> bool:
    """Write ``obj`` as JSON over the reserved blocks, then rename it to ``marker``.
    In a directory that no longer takes new names (read-only) the marker stays
    under the reservation's name, where readers look too."""
    obj = {**obj, "error": obj["error"][: RESERVED_BYTES // 2]}
    data = json.dumps(obj, sort_keys=True).encode()
    if len(data) > RESERVED_BYTES or not os.path.exists(reserve):
        return False
    try:
        with open(reserve, "r+b") as f:
            f.write(data)
            f.truncate(len(data))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.replace(reserve, marker)
    return True


def _packed(value: Any) -> dict[str, Any]:
    return value if is_packed(value) else pack(value)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def epoch_of(global_step: int, steps_per_epoch: int) -> tuple[int, int]:
    return global_step // steps_per_epoch, global_step % steps_per_epoch


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
        compression: str = "zstd",
        compression_level: int = DEFAULT_ZSTD_LEVEL,
        compression_threads: int = DEFAULT_ZSTD_THREADS,
        fatal_errors: bool = False,
        retention_policy: retention.RetentionPolicy | None = None,
        writer_process: bool = True,
    ):
        self.path = path
        # Only the coordinator's writer (the one that writes stats) deletes.
        self.retention = retention_policy
        self._sizes: dict[str, int] = {}
        self.fatal_errors = fatal_errors
        # (step, error) once the writer has stopped.
        self.stopped: tuple[int, BaseException] | None = None
        self.codec = compression
        self.level = compression_level
        self.threads = compression_threads
        # A step is complete only with the teacher's log-probs too.
        self.records_teacher = records_teacher
        self.shard = shard
        self.num_shards = num_shards
        self.steps_per_epoch = steps_per_epoch
        self.clone_tensors = clone_tensors
        self._snapshots = Snapshotter(clone_tensors)
        self._payloads = self._start_writer_process() if writer_process else None
        self._queue: queue.Queue = queue.Queue()
        # Counts steps (their batches, which hold the memory), not jobs: a bound
        # on jobs made training wait on a step's statistics while its batch was
        # still being written.
        self._batch_slots = threading.Semaphore(max_pending)
        self._waits, self._waited = 0, 0.0
        self._error: BaseException | None = None
        self._rng_sha256: dict[int, str] = {}
        self._closed = False
        self._reserve = os.path.join(path, reserved_marker_name(shard))
        _reserve_space(self._reserve, os.path.join(path, stopped_marker_name(shard)))
        self._thread = threading.Thread(
            target=self._run, name=f"areal-debug-writer-{shard}", daemon=True
        )
        self._thread.start()
        _live_writers.add(self)

    def _start_writer_process(self) -> payload_process.PayloadProcess | None:
        try:
            process = payload_process.shared()
            process.start(self.path)  # it imports torch while training starts
            return process
        except Exception as e:  # noqa: BLE001 - the thread can store instead
            self._no_writer_process(e)
            return None

    def _no_writer_process(self, error: BaseException) -> None:
        logger.warning(
            f"areal-debug could not use its writer process ({error!r}); payloads "
            "are stored on the writer thread instead, which may slow a Python-heavy "
            "training loop. Set debug.writer_process=false to silence this."
        )

    # -- training thread -----------------------------------------------------
    def submit_batch(
        self, global_step: int, batch: list[dict[str, Any]] | Future
    ) -> None:
        """Queue a step's batch. A ``Future`` of one (fetched on another thread,
        into fresh tensors) is awaited on the writer thread."""
        if not isinstance(batch, Future):
            batch = self._snapshots.take(batch, copier=not self._reads_memory())
        self._put(("batch", global_step, batch))

    def _reads_memory(self) -> bool:
        """Whether the writer process reads payloads out of this process."""
        payloads = self._payloads  # the writer thread may drop it meanwhile
        return payloads is not None and payloads.reads_memory

    def submit_teacher_logp(
        self, global_step: int, logps: list[torch.Tensor] | Future
    ) -> None:
        """Queue the teacher's log-probs of the step's batch, one tensor per
        trajectory in batch order (or a ``Future`` of the fetched list)."""
        if not isinstance(logps, Future):
            logps = snapshot_value(list(logps), self.clone_tensors, ("teacher_logp",))
        self._put(("teacher", global_step, logps))

    def submit_stats(
        self,
        global_step: int,
        stats: dict[str, float],
        timings: dict[str, float] | None = None,
        rollout: dict[str, float] | None = None,
    ) -> None:
        """Queue the step's committed statistics: training, timings, inference side."""
        payload = {
            "stats": dict(stats),
            "timings": dict(timings or {}),
            "rollout": dict(rollout or {}),
        }
        self._put(("stats", global_step, payload))

    def submit_rng(self, global_step: int, states: list[dict[str, Any]]) -> None:
        """Queue every rank's RNG states at the step's dump point (global rank 0)."""
        self._put(("rng", global_step, {"world_size": len(states), "ranks": states}))

    def submit_stages(
        self,
        global_step: int,
        stages: dict[str, Any],
        tensors: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Queue the step's stage digests (all ranks', merged), and the per-token
        stage tensors when kept; written before the step's statistics."""
        self._put(("stages", global_step, (stages, dict(tensors or {}))))

    def submit_pin(self, global_step: int, reasons: list[str], pins: list[int]) -> None:
        """Pin ``pins`` (never deleted) because ``global_step`` was anomalous."""
        self._put(("pin", global_step, {"reasons": list(reasons), "pinned": pins}))

    def flush(self) -> None:
        """Block until everything submitted is on disk; raise if writing failed."""
        self._queue.join()
        self._raise_if_failed()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self._snapshots.close()
        with contextlib.suppress(OSError):
            os.unlink(self._reserve)
        _live_writers.discard(self)
        self._raise_if_failed()

    def _put(self, job) -> None:
        self._raise_if_failed()
        if self._closed:
            raise RecordingError(
                "The recording writer is closed; nothing more can be recorded."
            )
        if self.stopped is not None:
            return  # the recording stopped; training goes on without it
        if job[0] == "batch" and not self._batch_slots.acquire(blocking=False):
            t0 = time.monotonic()
            self._batch_slots.acquire()
            self._waited_for_writer(time.monotonic() - t0)
        self._queue.put(job)

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

    def _raise_if_failed(self) -> None:
        if self._error is not None and self.fatal_errors:
            raise RecordingError(
                f"Writing the recording to {self.path} failed: {self._error!r}. "
                "Steps recorded before the failure are intact; fix the cause "
                "(disk space, permissions) and resume the run."
            ) from self._error

    # -- writer thread ---------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                if self._error is None:
                    kind, step, payload = job
                    if kind == "batch":
                        self._write_batch(step, payload)
                    elif kind == "teacher":
                        if isinstance(payload, Future):
                            payload = snapshot_value(
                                payload.result(), False, ("teacher_logp",)
                            )
                        self._write_teacher_logp(step, payload)
                    elif kind == "rng":
                        self._write_rng(step, payload)
                    elif kind == "pin":
                        self._write_pin(step, payload)
                    elif kind == "stages":
                        self._write_stages(step, *payload)
                    else:
                        self._write_stats(step, payload)
            except BaseException as e:  # noqa: BLE001 - surfaced on the training thread
                self._error = e
                try:
                    self._stop(job[1], e, job[0])
                except Exception as report_error:  # noqa: BLE001
                    # The thread must live on: flush() and close() wait for it.
                    logger.error(f"Recording writer failed: {e!r} ({report_error!r})")
            finally:
                if job is not None and job[0] == "batch":
                    self._batch_slots.release()
                self._queue.task_done()

    def _stop(self, step: int, error: BaseException, writing: str = "batch") -> None:
        """Record why and where this head stopped recording, and what it was
        writing (a job kind: a step's later files fail after its batch is whole);
        log it once."""
        self.stopped = (step, error)
        why = {
            "shard": self.shard,
            "step": step,
            "writing": writing,
            "error": repr(error),
            "time": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        then = (
            "Training stops (debug.fail_on_write_error=true)."
            if self.fatal_errors
            else "Training goes on without recording "
            "(set debug.fail_on_write_error=true to stop it instead)."
        )
        logger.error(
            f"areal-debug stopped recording at step {step} (shard {self.shard}) "
            f"writing {STOPPED_WRITING.get(writing, writing)}: {error!r}. "
            f"{_sentence(stop_consequence(why, self._complete(step)))} {then} "
            "Fix the cause (disk space, permissions) and start a new recording "
            "to record again."
        )
        marker = os.path.join(self.path, stopped_marker_name(self.shard))
        try:
            atomic_write_json(marker, why)
        except OSError as e:
            # A full disk or a read-only directory: the file reserved at start
            # still takes the marker.
            if not _write_into_reserve(self._reserve, marker, why):
                logger.error(f"Could not write {marker} either: {e!r}")

    def _step_dir(self, step: int) -> str:
        return os.path.join(self.path, step_dirname(step))

    def _complete(self, step: int) -> bool:
        return os.path.exists(os.path.join(self._step_dir(step), STEP_META))

    def _write_batch(self, step: int, payload) -> None:
        pending = payload if isinstance(payload, PendingCopy) else None
        try:
            if pending is not None:
                payload = pending.shared
                if pending.copied is not None:
                    payload = pending.copied.result()
            elif isinstance(payload, Future):
                payload = snapshot_batch(payload.result(), False)
            self._write_shard(step, payload, pending)
        except ChangedInPlace as e:
            self._snapshots.copy_on_training_thread()
            logger.warning(
                f"areal-debug did not record step {step} (shard {self.shard}): {e}. "
                "Its copy may not be what the inference side produced, so the "
                "step stays incomplete. From now on each batch is copied on the "
                "training thread before training uses it (exact, a little slower)."
            )

    def _store_payload(
        self, path: str, value: Any, describe: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Store ``value`` (a batch, or any container of tensors) or its packed
        form; with ``describe`` also its shard description.

        The writer process reads the tensors out of this process where it may,
        else gets them packed through shared memory; without a writer process
        the writer thread stores them itself.
        """
        if self._payloads is not None:
            try:
                if self._payloads.reads_memory and not is_packed(value):
                    try:
                        return self._payloads.store_plan(
                            path,
                            plan(value),
                            self.codec,
                            self.level,
                            describe,
                            self.threads,
                        )
                    except MemoryNotReadable as e:
                        logger.info(
                            f"areal-debug's writer process may not read this "
                            f"process's memory ({e}); payloads are copied into "
                            "shared memory for it instead."
                        )
                return self._payloads.store(
                    path,
                    _packed(value),
                    self.codec,
                    self.level,
                    describe,
                    self.threads,
                )
            except WriterProcessUnavailable as e:
                self._no_writer_process(e)
                self._payloads = None
        packed = _packed(value)
        stored = save_payload(path, packed, self.codec, self.level, None, self.threads)
        described = describe_packed(packed) if describe else None
        return stored, described

    def _write_shard(self, step: int, batch, pending: PendingCopy | None) -> None:
        """``batch``: the list or its packed copy; ``pending``: its versions to
        confirm once stored."""
        step_dir = self._step_dir(step)
        name = shard_payload_name(self.shard, self.codec)
        path = os.path.join(step_dir, name)
        stored, described = self._store_payload(path, batch, describe=True)
        if pending is not None:
            try:
                # An in-place change still running during the copy shows now.
                pending.confirm()
            except ChangedInPlace:
                os.unlink(path)
                raise
        meta = {"shard": self.shard, **stored, **described}
        atomic_write_json(os.path.join(step_dir, shard_meta_name(self.shard)), meta)
        logger.info(
            f"Recorded step {step} shard {self.shard + 1}/{self.num_shards}: "
            f"{meta['num_trajectories']} trajectories, {meta['num_tokens']} tokens, "
            f"{stored['bytes'] / 2**20:.2f} MiB on disk "
            f"({stored['raw_bytes'] / 2**20:.2f} MiB uncompressed)"
        )
        self._maybe_finish_step(step)

    def _write_teacher_logp(self, step: int, logps: list[torch.Tensor]) -> None:
        step_dir = self._step_dir(step)
        path = os.path.join(step_dir, teacher_payload_name(self.codec))
        stored, _ = self._store_payload(path, logps)
        meta = {**stored, "num_trajectories": len(logps)}
        atomic_write_json(os.path.join(step_dir, TEACHER_LOGP_META), meta)
        self._maybe_finish_step(step)

    def _maybe_finish_step(self, step: int) -> None:
        """Write step.json once every head's shard metadata is on disk.

        Each head checks after writing its own shard, so the last one to finish
        always sees all of them. Two heads finishing together both write the
        same content; the rename makes either result whole.
        """
        step_dir = self._step_dir(step)
        metas = []
        for shard in range(self.num_shards):
            p = os.path.join(step_dir, shard_meta_name(shard))
            if not os.path.exists(p):
                return
            metas.append(read_json(p, "shard metadata"))
        teacher = None
        if self.records_teacher:
            p = os.path.join(step_dir, TEACHER_LOGP_META)
            if not os.path.exists(p):
                return
            teacher = read_json(p, "teacher log-prob metadata")
        epoch, epoch_step = epoch_of(step, self.steps_per_epoch)
        versions = [m["policy_version"] for m in metas if m["policy_version"]]
        step_meta = {
            "format_version": FORMAT_VERSION,
            "global_step": step,
            "epoch": epoch,
            "epoch_step": epoch_step,
            "num_shards": self.num_shards,
            "num_trajectories": sum(m["num_trajectories"] for m in metas),
            "num_tokens": sum(m["num_tokens"] for m in metas),
            "policy_version": [min(v[0] for v in versions), max(v[1] for v in versions)]
            if versions
            else None,
            "shards": metas,
        }
        if teacher is not None:
            step_meta["teacher_logp"] = teacher
        atomic_write_json(os.path.join(step_dir, STEP_META), step_meta)

    def _write_rng(self, step: int, payload: dict) -> None:
        # Uncompressed (a few KiB); stats.json, written after this by the same
        # thread, carries the checksum.
        stored = save_payload(os.path.join(self._step_dir(step), RNG), payload)
        self._rng_sha256[step] = stored["sha256"]

    def _write_stages(self, step: int, stages: dict, tensors: dict) -> None:
        step_dir = self._step_dir(step)
        if not os.path.isdir(step_dir):
            return  # the step's batch was not recorded
        body = {"global_step": step, **stages}
        if tensors:
            stored = save_payload(os.path.join(step_dir, STAGE_TENSORS), tensors)
            body["tensors_sha256"] = stored["sha256"]
        atomic_write_json(os.path.join(step_dir, STAGES_FILE), body)

    def _write_stats(self, step: int, payload: dict) -> None:
        rng_sha = self._rng_sha256.pop(step, None)
        if rng_sha is not None:
            payload = {**payload, "rng_sha256": rng_sha}
        atomic_write_json(
            os.path.join(self._step_dir(step), STATS), {"global_step": step, **payload}
        )
        if self.retention is not None and self.retention.deletes:
            self._retain()

    def _write_pin(self, step: int, payload: dict) -> None:
        if self.retention is not None:
            self.retention.pinned.update(payload["pinned"])
        step_dir = self._step_dir(step)
        if os.path.isdir(step_dir):
            # Written with the step: what fired, and which steps it keeps.
            atomic_write_json(
                os.path.join(step_dir, ANOMALY), {"global_step": step, **payload}
            )

    def _retain(self) -> None:
        """Delete what the retention policy lets go (after each recorded step)."""
        kept_root = os.path.join(self.path, KEPT)
        steps = complete_step_dirs(self.path)
        ckpts = {
            c: os.path.join(kept_root, step_dirname(c)) for c in kept_steps(self.path)
        }
        newest = max(steps, default=None)
        result = retention.plan(
            self.retention,
            {s: self._size(d, cache=s != newest) for s, d in steps.items()},
            {c: self._size(d) for c, d in ckpts.items()},
        )
        retention.apply(self.path, result, kept_root)
        for d in [
            *(steps[s] for s in result.delete_steps),
            *(ckpts[c] for c in result.delete_checkpoints),
        ]:
            self._sizes.pop(d, None)

    def _size(self, directory: str, cache: bool = True) -> int:
        # A complete step (or kept checkpoint) does not change: measure it once.
        if directory in self._sizes:
            return self._sizes[directory]
        size = dir_bytes(directory)
        if cache:
            self._sizes[directory] = size
        return size


_live_writers: weakref.WeakSet[RecordingWriter] = weakref.WeakSet()


@atexit.register
def _close_live_writers() -> None:
    # A script that never calls trainer.close() must not lose queued steps.
    for writer in list(_live_writers):
        try:
            writer.close()
        except Exception as e:  # noqa: BLE001
            logger.error(f"Recording writer for {writer.path} failed at exit: {e!r}")


def write_manifest(path: str, manifest: Manifest | dict[str, Any]) -> None:
    """Create or continue a recording at ``path`` (the coordinator only).

    Continuing is allowed for the same experiment, trial and layout (a resumed
    dump run); anything else is refused so no recording is ever mixed.
    """
    if isinstance(manifest, dict):
        manifest = Manifest.from_json(manifest)
    manifest_path = os.path.join(path, MANIFEST)
    if os.path.exists(manifest_path):
        old = Manifest.from_json(read_json(manifest_path, "manifest"))
        mismatched = {
            k: (getattr(old, k), getattr(manifest, k))
            for k in ("format_version", "experiment_name", "trial_name")
            if getattr(old, k) != getattr(manifest, k)
        }
        shape = ("num_shards", "steps_per_epoch")
        old_layout = {k: getattr(old.layout, k) for k in shape}
        new_layout = {k: getattr(manifest.layout, k) for k in shape}
        if old_layout != new_layout:
            mismatched["layout"] = (old_layout, new_layout)
        if mismatched:
            details = "; ".join(
                f"{k}: recorded {a!r}, this run {b!r}"
                for k, (a, b) in mismatched.items()
            )
            raise RecordingError(
                f"debug.path={path} already holds a different recording ({details}). "
                "Recordings are never mixed or overwritten: set debug.path to a new "
                "directory, or move the old recording away."
            )
        logger.info(
            f"Continuing the recording at {path} (same experiment, trial and layout)."
        )
        manifest.created = old.created or manifest.created
    atomic_write_json(manifest_path, manifest.to_json())


def sweep_leftovers(path: str, before_step: int) -> list[str]:
    """Remove what a killed dump run left half-done: temporary files of atomic
    writes, half-deleted steps and half-copied checkpoints.

    None of it is visible as recorded data (a reader never lists it), but it
    holds disk. Run by the coordinator of a resumed run before any head
    writes; steps from ``before_step`` on are being recorded again and are
    moved aside whole (``supersede_steps``), so their directories are left be.
    """
    swept = []
    kept_root = os.path.join(path, KEPT)
    places = [path, kept_root] + [
        d for s, d in list_step_dirs(path).items() if s < before_step
    ]
    for place in places:
        if not os.path.isdir(place):
            continue
        for name in os.listdir(place):
            half_done = (
                name.startswith(TEMPORARY_PREFIX)
                or name.startswith(retention.DELETING_PREFIX)
                or (place == kept_root and name.endswith(".partial"))
            )
            if half_done:
                target = os.path.join(place, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(target)
                swept.append(target)
    if swept:
        logger.warning(
            f"Removed {len(swept)} leftovers of an interrupted dump run from {path} "
            "(temporary files, half-deleted steps, half-copied checkpoints); no "
            "recorded step was among them."
        )
    return swept


def supersede_steps(path: str, first_step: int) -> list[int]:
    """Move steps >= ``first_step`` aside before they are recorded again.

    A resumed dump run regenerates those steps; the old ones go to
    ``superseded/<time>/`` instead of being overwritten (nothing is lost).
    """
    if not os.path.isdir(path):
        return []
    moved = []
    target = os.path.join(path, "superseded", time.strftime("%Y%m%d-%H%M%S"))
    for step, step_dir in list_step_dirs(path).items():
        if step >= first_step:
            os.makedirs(target, exist_ok=True)
            shutil.move(step_dir, os.path.join(target, os.path.basename(step_dir)))
            moved.append(step)
    if moved:
        logger.warning(
            f"Steps {moved} were already recorded at {path} and will be recorded "
            f"again by this run; the old ones were moved to {target}."
        )
    return moved
