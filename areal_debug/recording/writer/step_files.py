# SPDX-License-Identifier: Apache-2.0
"""The writer thread's work: each job's files in its step's directory, step.json
once the step is whole, and what the retention policy lets go after it."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from areal_debug.recording import retention
from areal_debug.recording.atomic import atomic_write_json, read_json
from areal_debug.recording.format import (
    ANOMALY,
    KEPT,
    RNG,
    STAGES_FILE,
    STATS,
    STEP_META,
    TEACHER_LOGP_META,
    Codec,
    complete_step_dirs,
    dir_bytes,
    kept_steps,
    shard_meta_name,
    shard_payload_name,
    stage_tensors_name,
    step_dirname,
    teacher_payload_name,
)
from areal_debug.recording.schema import PayloadEntry, ShardMeta, StepMeta
from areal_debug.recording.writer.jobs import (
    BatchJob,
    Job,
    PinJob,
    RngJob,
    StagesJob,
    StatsJob,
    TeacherLogpJob,
    logger,
)
from areal_debug.recording.writer.payload_file import save_payload
from areal_debug.recording.writer.process.messages import MetaFile, StepFile
from areal_debug.recording.writer.router import PayloadRouter
from areal_debug.recording.writer.snapshot import (
    ChangedInPlace,
    PendingCopy,
    Snapshotter,
    snapshot_batch,
    snapshot_value,
)

# Steps whose own shard metadata a head keeps in memory (older ones are read
# back from disk: a step whose teacher log-probs come that late).
OWN_METAS_KEPT = 4


class StepFiles:
    """Writes one data-parallel head's files of each step (and, on the
    coordinator, the step-wide ones), each job by its type."""

    def __init__(
        self,
        path: str,
        *,
        shard: int,
        num_shards: int,
        steps_per_epoch: int,
        records_teacher: bool,
        payloads: PayloadRouter,
        snapshots: Snapshotter,
        retainer: Retainer | None,
    ):
        self.path = path
        self.shard = shard
        self.num_shards = num_shards
        self.steps_per_epoch = steps_per_epoch
        # A step is complete only with the teacher's log-probs too.
        self.records_teacher = records_teacher
        self.payloads = payloads
        self._snapshots = snapshots
        # Deletes after each step's statistics (the coordinator's writer only).
        self.retainer = retainer
        self._rng_sha256: dict[int, str] = {}
        # This head's shard metadata of its latest steps, as written: step.json
        # needs it, and reading back what was just written costs a dozen system
        # calls (each one a GIL hand-over with a busy training thread).
        self._own_metas: dict[int, ShardMeta] = {}
        self._handlers: dict[type[Job], Callable[[Any], None]] = {
            BatchJob: self._write_batch,
            TeacherLogpJob: self._write_teacher_logp,
            RngJob: self._write_rng,
            StagesJob: self._write_stages,
            StatsJob: self._write_stats,
            PinJob: self._write_pin,
        }

    def write(self, job: Job) -> None:
        """Write ``job``'s files, by the handler of its type."""
        self._handlers[type(job)](job)

    def step_dir(self, step: int) -> str:
        return os.path.join(self.path, step_dirname(step))

    def complete(self, step: int) -> bool:
        return os.path.exists(os.path.join(self.step_dir(step), STEP_META))

    @property
    def codec(self) -> Codec:
        return self.payloads.codec

    def _write_batch(self, job: BatchJob) -> None:
        step, payload = job.step, job.batch
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

    def _write_shard(self, step: int, batch, pending: PendingCopy | None) -> None:
        """``batch``: the list or its packed copy; ``pending``: its versions to
        confirm once stored."""
        step_dir = self.step_dir(step)
        path = os.path.join(step_dir, shard_payload_name(self.shard, self.codec))
        # With the payload, where this shard alone makes the step whole (one
        # head, no teacher log-probs to come, no copy to confirm): step.json too.
        whole = pending is None and self.num_shards == 1 and not self.records_teacher
        meta_file = MetaFile(
            os.path.join(step_dir, shard_meta_name(self.shard)),
            self.shard,
            StepFile(os.path.join(step_dir, STEP_META), step, self.steps_per_epoch)
            if whole
            else None,
        )
        # Written with the payload (by the writer process, sparing this thread
        # a dozen system calls), unless the copy is still to be confirmed while
        # another head could take the metadata as the shard's (it writes
        # step.json once every head's metadata is there).
        early = pending is None or self.num_shards == 1
        stored, described = self.payloads.store(
            path, batch, describe=True, meta=meta_file if early else None
        )
        if pending is not None:
            try:
                # An in-place change still running during the copy shows now.
                pending.confirm()
            except ChangedInPlace:
                if early:
                    os.unlink(meta_file.path)
                os.unlink(path)
                raise
        meta = ShardMeta.written(self.shard, stored, described)
        if not early:
            atomic_write_json(meta_file.path, meta.to_json())
        self._own_metas[step] = meta
        while len(self._own_metas) > OWN_METAS_KEPT:
            del self._own_metas[min(self._own_metas)]
        logger.info(
            f"Recorded step {step} shard {self.shard + 1}/{self.num_shards}: "
            f"{meta.num_trajectories} trajectories, {meta.num_tokens} tokens, "
            f"{meta.entry.bytes / 2**20:.2f} MiB on disk "
            f"({meta.entry.raw_bytes / 2**20:.2f} MiB uncompressed)"
        )
        if not whole:
            self._maybe_finish_step(step)

    def _write_teacher_logp(self, job: TeacherLogpJob) -> None:
        logps = job.logps
        if isinstance(logps, Future):
            logps = snapshot_value(logps.result(), False, ("teacher_logp",))
        step_dir = self.step_dir(job.step)
        path = os.path.join(step_dir, teacher_payload_name(self.codec))
        stored, _ = self.payloads.store(path, logps)
        meta = PayloadEntry.stored(stored, len(logps))
        atomic_write_json(os.path.join(step_dir, TEACHER_LOGP_META), meta.to_json())
        self._maybe_finish_step(job.step)

    def _maybe_finish_step(self, step: int) -> None:
        """Write step.json once every head's shard metadata is on disk.

        Each head checks after writing its own shard, so the last one to finish
        always sees all of them. Two heads finishing together both write the
        same content; the rename makes either result whole.
        """
        step_dir = self.step_dir(step)
        metas = []
        for shard in range(self.num_shards):
            if shard == self.shard and step in self._own_metas:
                metas.append(self._own_metas[step])
                continue
            p = os.path.join(step_dir, shard_meta_name(shard))
            if not os.path.exists(p):
                return
            what = "shard metadata"
            metas.append(ShardMeta.from_json(read_json(p, what), p, what=what))
        teacher = None
        if self.records_teacher:
            p = os.path.join(step_dir, TEACHER_LOGP_META)
            if not os.path.exists(p):
                return
            what = "teacher log-prob metadata"
            teacher = PayloadEntry.from_json(read_json(p, what), p, what=what)
        step_meta = StepMeta.of_shards(step, self.steps_per_epoch, metas, teacher)
        atomic_write_json(os.path.join(step_dir, STEP_META), step_meta.to_json())

    def _write_rng(self, job: RngJob) -> None:
        payload = {"world_size": len(job.states), "ranks": job.states}
        # Uncompressed (a few KiB); stats.json, written after this by the same
        # thread, carries the checksum.
        stored = save_payload(os.path.join(self.step_dir(job.step), RNG), payload)
        self._rng_sha256[job.step] = stored["sha256"]

    def _write_stages(self, job: StagesJob) -> None:
        step_dir = self.step_dir(job.step)
        if not os.path.isdir(step_dir):
            return  # the step's batch was not recorded
        body = {"global_step": job.step, **job.stages}
        if job.tensors:
            # Through the recording's codec: the trainer's log-probs are kept every
            # step (debug.record_trainer_logp), about 8 bytes a token raw.
            name = stage_tensors_name(self.codec)
            stored = save_payload(
                os.path.join(step_dir, name),
                job.tensors,
                self.codec,
                self.payloads.level,
            )
            body["tensors_sha256"] = stored["sha256"]
            body["tensors_file"] = name
            body["tensors_codec"] = stored["codec"]
            body["tensors_raw_bytes"] = stored["raw_bytes"]
        atomic_write_json(os.path.join(step_dir, STAGES_FILE), body)

    def _write_stats(self, job: StatsJob) -> None:
        body = {
            "global_step": job.step,
            "stats": job.stats,
            "timings": job.timings,
            "rollout": job.rollout,
        }
        rng_sha = self._rng_sha256.pop(job.step, None)
        if rng_sha is not None:
            body["rng_sha256"] = rng_sha
        atomic_write_json(os.path.join(self.step_dir(job.step), STATS), body)
        if self.retainer is not None:
            self.retainer.after_step()

    def _write_pin(self, job: PinJob) -> None:
        if self.retainer is not None:
            self.retainer.pin(job.pinned)
        step_dir = self.step_dir(job.step)
        if os.path.isdir(step_dir):
            # Written with the step: what fired, and which steps it keeps.
            body = {"global_step": job.step, "reasons": job.reasons}
            body["pinned"] = job.pinned
            atomic_write_json(os.path.join(step_dir, ANOMALY), body)


class Retainer:
    """Applies the retention policy after each recorded step: deletes the steps
    and kept checkpoints it lets go, never a pinned one."""

    def __init__(self, path: str, policy: retention.RetentionPolicy):
        self.path = path
        self.policy = policy
        # Sizes of complete steps and kept checkpoints (they do not change).
        self._sizes: dict[str, int] = {}

    def pin(self, steps: list[int]) -> None:
        """Never delete ``steps``."""
        self.policy.pinned.update(steps)

    def after_step(self) -> None:
        if not self.policy.deletes:
            return
        kept_root = os.path.join(self.path, KEPT)
        steps = complete_step_dirs(self.path)
        ckpts = {
            c: os.path.join(kept_root, step_dirname(c)) for c in kept_steps(self.path)
        }
        newest = max(steps, default=None)
        result = retention.plan(
            self.policy,
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
