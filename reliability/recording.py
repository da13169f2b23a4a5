# SPDX-License-Identifier: Apache-2.0
"""A small recording with every kind of file, written by the real writer, and
everything a replay reads from it."""

from __future__ import annotations

from typing import Any

import torch

from areal_debug.modes import rng_state
from areal_debug.recording.format import FORMAT_VERSION, RecordingError
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest

NUM_SHARDS = 2
STEPS = (0, 1)


def trajectory(seed: int, group: int = 2, length: int = 6) -> dict[str, Any]:
    """One trajectory as AReaL's RLVR workflow returns it."""
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 50, (group, length), generator=g),
        "attention_mask": torch.ones(group, length, dtype=torch.bool),
        "loss_mask": torch.ones(group, length, dtype=torch.int32),
        "logprobs": -torch.rand(group, length, generator=g),
        "versions": torch.full((group, length), seed % 3, dtype=torch.int32),
        "rewards": torch.rand(group, generator=g),
    }


def batch(step: int, shard: int) -> list[dict[str, Any]]:
    return [trajectory(100 * step + 10 * shard + i) for i in range(2)]


MANIFEST = {
    "format_version": FORMAT_VERSION,
    "created": "now",
    "experiment_name": "reliability",
    "trial_name": "t0",
    "layout": {"num_shards": NUM_SHARDS, "steps_per_epoch": 100},
}


def writers(
    path: str, num_shards: int = NUM_SHARDS, **options
) -> list[RecordingWriter]:
    """One writer per data-parallel head; head 0 is the coordinator (teacher
    log-probs, RNG, stages, stats, retention)."""
    retention = options.pop("retention_policy", None)
    return [
        RecordingWriter(
            path,
            shard=s,
            num_shards=num_shards,
            steps_per_epoch=100,
            # Every head: whichever finishes a step last needs the teacher file.
            records_teacher=True,
            retention_policy=retention if s == 0 else None,
            **options,
        )
        for s in range(num_shards)
    ]


def submit_step(heads: list[RecordingWriter], step: int) -> None:
    """Everything a dump run records for ``step``, in the order it does."""
    coordinator = heads[0]
    for s, w in enumerate(heads):
        w.submit_batch(step, batch(step, s))
    coordinator.submit_teacher_logp(
        step, [t["logprobs"] for s in range(len(heads)) for t in batch(step, s)]
    )
    coordinator.submit_rng(step, [rng_state.capture()] * len(heads))
    coordinator.submit_stages(
        step,
        {"ranks": [{"logp": {"0": "ab" * 16}}], "global": {"weights": {}}},
        {"logp/0": torch.arange(6.0) + step},
    )
    coordinator.submit_stats(step, {"loss": 0.5 + step}, {"timeperf/train": 0.1})


def write(path: str, steps=STEPS, manifest: dict | None = None) -> None:
    """Record ``steps`` at ``path`` with every optional file a step can have
    (``manifest``: MANIFEST's keys, some replaced)."""
    write_manifest(path, MANIFEST if manifest is None else manifest)
    heads = writers(path)
    for step in steps:
        submit_step(heads, step)
    for w in heads:
        w.close()


def altered(reader, step: int, batches: list | None = None) -> str | None:
    """Which shard of ``step`` reads back other than ``submit_step`` recorded it
    (``batches``: already loaded), None if every one is exact."""
    for shard in range(reader.num_shards):
        got = reader.load_shard(step, shard) if batches is None else batches[shard]
        if not same(got, batch(step, shard)):
            return f"step {step} shard {shard} read back altered"
    return None


def read_everything(path: str) -> dict[str, Any]:
    """What a replay, ``verify`` and ``inspect`` read, by step: raises only
    ``RecordingError`` for anything wrong with the recording."""
    reader = RecordingReader(path)
    reader.incomplete_steps()
    reader.stopped()
    out: dict[str, Any] = {}
    for step in reader.available_steps():
        reader.require_steps([step])
        _, problems = reader.verify_step(step)
        if problems:
            raise RecordingError(problems[0])
        out[step] = {
            "shards": [reader.load_shard(step, s) for s in range(reader.num_shards)],
            "whole": reader.load_for_head(step, 0, 1),
            "teacher": reader.recorded_teacher_logp(step)
            if reader.step_meta(step).teacher_logp is not None
            else None,
            "rng": reader.recorded_rng(step),
            "stats": reader.recorded_stats(step),
            "stages": reader.recorded_stages(step),
        }
    return out


def same(a: Any, b: Any) -> bool:
    """Exactly equal: tensors by dtype, shape and bits; containers by type."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(same(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    return a == b or (a != a and b != b)  # NaN equals NaN here
