# SPDX-License-Identifier: Apache-2.0
"""The reproducer's recording (``areal-debug extract``): the one step it needs,
copied, renumbered to step 0, or cut to a subset of its trajectories, its
manifest, and the kept recover checkpoint before it."""

from __future__ import annotations

import datetime
import json
import os
import shutil

from areal_debug.areal_compat import kept_step_info
from areal_debug.inspect.common import (
    InspectError,
)
from areal_debug.recording.atomic import atomic_write_bytes, atomic_write_json
from areal_debug.recording.checkpoints import KEPT, _TreeCopy
from areal_debug.recording.format import MANIFEST, STEP_META, step_dirname
from areal_debug.recording.manifest import Manifest
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.version import areal_debug_version

# Statistics fixed by the batch alone (AReaL computes them before any forward
# pass): they must match whatever weights the replay starts from. Counts and
# extremes exactly; averages up to summation order.
BATCH_EXACT_SUFFIXES = ("n_seqs", "n_tokens", "n_valid_tokens", "/min", "/max")
BATCH_PREFIXES = (
    "ppo_actor/n_seqs",
    "ppo_actor/n_tokens",
    "ppo_actor/n_valid_tokens",
    "ppo_actor/task_reward/",
    "ppo_actor/seq_len/",
    "ppo_actor/prompt_len/",
    "ppo_actor/correct_n_seqs",
    "ppo_actor/incorrect_n_seqs",
    "ppo_actor/correct_seq_len/",
    "ppo_actor/incorrect_seq_len/",
    "ppo_actor/no_eos_ratios/",
)


def batch_statistics(stats: dict[str, float]) -> tuple[dict, dict]:
    """(exact, close) statistics of ``stats`` that depend on the batch only."""
    exact, close = {}, {}
    for name, value in stats.items():
        if not name.startswith(BATCH_PREFIXES):
            continue
        (exact if name.endswith(BATCH_EXACT_SUFFIXES) else close)[name] = value
    return exact, close


def _write_manifest(reader, rec, step, plan, trajectories, single) -> None:
    with open(os.path.join(reader.path, MANIFEST)) as f:
        raw = json.load(f)
    if single:
        raw["layout"] = {
            **raw["layout"],
            "num_shards": 1,
            "train_dp_size": 1,
            "world_size": 1,
        }
    raw["extracted_from"] = {
        "recording": os.path.abspath(reader.path),
        "step": step,
        "as_step": plan.renumber.get(step, step),
        "trajectories": trajectories,
        "checkpoint": plan.checkpoint,
        "faithful": plan.faithful and trajectories is None,
        "areal_debug_version": areal_debug_version(),
        "time": datetime.datetime.now(datetime.UTC).isoformat(),
    }
    Manifest.from_json(raw)  # what a reader will check
    # The raw dict, not Manifest.to_json: it keeps `extracted_from` (readers
    # ignore keys they do not know).
    atomic_write_json(os.path.join(rec, MANIFEST), raw)


def _copy_step(reader: RecordingReader, rec: str, step: int) -> None:
    """The step's files byte for byte (checksums checked first); step.json last."""
    for shard in range(reader.step_meta(step).num_shards):
        reader.load_shard(step, shard)  # verifies checksum and safe loading
    reader.recorded_rng(step)
    if reader.manifest.recorded_teacher_logp:
        reader.recorded_teacher_logp(step)
    src = os.path.join(reader.path, step_dirname(step))
    dst = os.path.join(rec, step_dirname(step))
    names = sorted(n for n in os.listdir(src) if not n.startswith("."))
    for name in [n for n in names if n != STEP_META] + [STEP_META]:
        with open(os.path.join(src, name), "rb") as f:
            atomic_write_bytes(os.path.join(dst, name), f.read())


def _write_with_writer(
    reader, rec, step, target, shards: list[list], stats: dict | None, codec: str
) -> None:
    """Shards, RNG states and statistics as a dump run writes them (same writer)."""
    writers = [
        RecordingWriter(
            rec,
            shard=i,
            num_shards=len(shards),
            steps_per_epoch=reader.steps_per_epoch,
            compression=codec,
            writer_process=False,  # no training loop here to keep the GIL for
        )
        for i in range(len(shards))
    ]
    try:
        rng = reader.recorded_rng(step)
        if rng is not None:
            writers[0].submit_rng(target, rng["ranks"])
        if stats is not None:
            writers[0].submit_stats(target, stats["stats"], {}, {})
        for w, batch in zip(writers, shards):
            w.submit_batch(target, batch)
    finally:
        for w in writers:
            w.close()


def _codec(reader, step) -> str:
    return reader.step_meta(step).shards[0].entry.codec


def _write_renumbered(reader: RecordingReader, rec: str, step: int, target: int):
    """The whole step as ``target``; only its batch statistics kept as recorded."""
    shards = [reader.load_shard(step, s) for s in range(reader.num_shards)]
    exact, close = batch_statistics(reader.recorded_stats(step) or {})
    _write_with_writer(
        reader,
        rec,
        step,
        target,
        shards,
        {"stats": {**exact, **close}},
        _codec(reader, step),
    )


def _write_subset(reader, rec, step, target, trajectories: list[int] | None):
    """Chosen trajectories of the global batch (all: ``None``) as one shard."""
    whole = [t for s in range(reader.num_shards) for t in reader.load_shard(step, s)]
    batch = whole if trajectories is None else [whole[i] for i in trajectories]
    stats = (
        None
        if trajectories is not None
        else {"stats": reader.recorded_stats(step) or {}}
    )
    # A subset keeps no recorded statistic: none of them describe this batch.
    _write_with_writer(
        reader, rec, step, target, [batch], stats or {"stats": {}}, _codec(reader, step)
    )


def _copy_checkpoint(src_recording: str, rec: str, ckpt: int) -> None:
    """The kept recover checkpoint, whole or not at all (as the dump keeps it)."""
    src = os.path.join(src_recording, KEPT, step_dirname(ckpt))
    info = kept_step_info(src)
    if not os.path.exists(info):
        raise InspectError(
            f"The kept checkpoint {src} has no {os.path.relpath(info, src)}: it is not "
            "whole. Extract with --no-checkpoint, or choose another step."
        )
    dst = os.path.join(rec, KEPT, step_dirname(ckpt))
    tmp = dst + ".partial"
    try:
        _TreeCopy().tree(src, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.replace(tmp, dst)
