# SPDX-License-Identifier: Apache-2.0
"""How small does a recording get, and at what CPU cost? (format v2 payload codecs)

On two kinds of data, stored through the real RecordingWriter:

- ``stored_bytes_vs_torch_save[512x2048]``: a realistically padded RLVR batch
  (benchmarks/rlvr_batch.py; default 128 prompts x 4 samples = 512 sequences of
  at most 2048 tokens) in the dtypes AReaL's RLVR workflow builds (int32 ids,
  masks and versions), with the log-probs of sampled tokens (mostly near 0, a
  tail of negative values), stored with the default codec and level, over an
  uncompressed ``torch.save`` of the same batch; every zstd level is context;
- ``stored_bytes_vs_torch_save[demo]``: the CPU demo's own recording (real token
  ids of its tokenizer, the log-probs its server sampled; ``--workdir DIR
  --reuse`` reads the demo that replay_wait.py ran in DIR, otherwise it is run
  here, about 1-2 minutes): its payloads' bytes on disk over a ``torch.save`` of
  each payload as loaded back;
- ``lossless_round_trip``: 1 when every tensor read back has the dtype, shape
  and bit pattern (compared as integers: -0.0 is not 0.0 and a NaN equals its
  own bits) of the one written, with each codec, on the RLVR batch and on one
  of values that compare wrongly as numbers: NaN (two payloads), +-inf, -0.0,
  subnormals, float32, bf16 and fp16;
- ``uncompressed_codec_bytes_vs_torch_save``: the ``none`` codec's bytes over
  ``torch.save``.

Figures are printed as ``NAME: VALUE (target OP VALUE) ok|MISS``, measured once:
stored bytes and a bitwise round trip do not vary from run to run (the speeds,
which do, are context); lines starting with ``#`` are context.

    .venv/bin/python benchmarks/compression.py [--prompts 128] [--group 4] [--workdir DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import zstandard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_run import add_demo_arguments, demo_recording, run_demo  # noqa: E402
from figures import emit, exit_status, figure  # noqa: E402
from rlvr_batch import padded_rlvr_batch  # noqa: E402

from areal_debug.recording.format import DEFAULT_ZSTD_LEVEL  # noqa: E402
from areal_debug.recording.reader import RecordingReader  # noqa: E402
from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402

LEVELS = (-3, -1, 1, 3, 6, 10)
# The disk budget docs/flight-recorder.md's arithmetic plans with: a step stored
# in at most a fifth of its torch.save size. It holds for any recording, the
# demo's real one as much as the synthetic batch.
STORED_TARGET = 0.2
# An integer dtype of each element size, to compare tensors by their bits.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bit pattern (``torch.equal`` says -0.0 == 0.0 and
    NaN != NaN)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bits = _BITS[a.element_size()]
    return torch.equal(a.view(bits), b.view(bits))


def special_values_batch() -> list[dict[str, torch.Tensor]]:
    """Two trajectories whose floats compare wrongly as numbers: NaNs (the
    default one and one with another payload, in each dtype), +-inf, -0.0, the
    smallest subnormal and the largest finite float32, as float32, bf16 and
    fp16."""
    values = torch.tensor(
        [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e-45, -3.4e38, -0.5]
    )
    n = 2 * len(values) + 1
    payload_nan = len(values)  # where each dtype gets a NaN of another payload
    nans = {torch.float32: 0x7FC00001, torch.bfloat16: 0x7FC1, torch.float16: 0x7E01}

    def specials(dtype: torch.dtype) -> torch.Tensor:
        t = torch.cat([values, torch.zeros(1), -values]).to(dtype)
        bits = _BITS[t.element_size()]
        t.view(bits)[payload_nan] = nans[dtype]
        return t[None]

    ids = torch.arange(n, dtype=torch.int32)[None]
    out = []
    for logp_dtype in (torch.float32, torch.bfloat16):
        out.append(
            {
                "input_ids": ids,
                "attention_mask": torch.ones(1, n, dtype=torch.bool),
                "loss_mask": torch.ones(1, n, dtype=torch.int32),
                "logprobs": specials(logp_dtype),
                "versions": torch.zeros(1, n, dtype=torch.int32),
                "rewards": torch.tensor([float("nan")]),
                "values_fp16": specials(torch.float16),
                "values_bf16": specials(torch.bfloat16),
            }
        )
    return out


def stored(batch, root: str, codec: str, level: int) -> tuple[int, bool]:
    """Bytes on disk for one step written with ``codec``, and a bitwise round trip."""
    path = os.path.join(root, f"{codec}-{level}")
    write_manifest(
        path,
        {
            "format_version": 2,
            "experiment_name": "bench",
            "trial_name": "t",
            "layout": {"num_shards": 1, "steps_per_epoch": 1},
        },
    )
    w = RecordingWriter(
        path,
        shard=0,
        num_shards=1,
        steps_per_epoch=1,
        compression=codec,
        compression_level=level,
    )
    w.submit_batch(0, batch)
    w.close()
    reader = RecordingReader(path)
    nbytes = reader.step_meta(0).shards[0].entry.bytes
    loaded = reader.load_shard(0, 0)
    same = all(
        a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
        for a, b in zip(batch, loaded, strict=True)
    )
    return nbytes, same


def saved(obj) -> bytes:
    """``obj`` as an uncompressed ``torch.save`` writes it."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def demo_bytes(path: str) -> tuple[int, int, int, int]:
    """The demo recording's payload bytes on disk, the torch.save bytes of the
    same payloads as loaded back, its steps, and all its files' bytes."""
    reader = RecordingReader(path)
    on_disk = torch_saved = 0
    for step in reader.available_steps():
        for shard in reader.step_meta(step).shards:
            on_disk += shard.entry.bytes
            torch_saved += len(saved(reader.load_shard(step, shard.shard)))
    files = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
    )
    return on_disk, torch_saved, len(reader.available_steps()), files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument(
        "--max-new-tokens", type=int, default=1536, help="prompts take up to 512"
    )
    add_demo_arguments(ap, "demo steps (when run here)")
    args = ap.parse_args(argv)
    logging.getLogger("DebugDump").setLevel(logging.WARNING)
    batch = padded_rlvr_batch(
        args.prompts, args.group, max_new_tokens=args.max_new_tokens
    )
    data = saved(batch)
    raw = len(data)
    tokens = sum(int(t["attention_mask"].sum()) for t in batch)
    padded = sum(t["attention_mask"].numel() for t in batch)
    longest = max(t["input_ids"].shape[1] for t in batch)
    dtypes = ", ".join(f"{k} {str(v.dtype)[6:]}" for k, v in batch[0].items())
    print(
        f"# batch: {args.prompts} x {args.group} sequences of at most {longest} "
        f"tokens, {tokens} tokens, {1 - tokens / padded:.0%} padding; torch.save "
        f"{raw / 2**20:.1f} MiB; {dtypes}"
    )
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for level in LEVELS:
            t0 = time.perf_counter()
            zstandard.ZstdCompressor(level=level).compress(data)
            speed = raw / (time.perf_counter() - t0) / 2**20
            nbytes, same = stored(batch, root, "zstd", level)
            results[level] = (nbytes / raw, speed, same)
            print(
                f"# zstd level {level}: {nbytes / raw:.4f} of torch.save, "
                f"compresses {speed:.0f} MiB/s, bitwise round trip {same}"
            )
        none_bytes, none_same = stored(batch, root, "none", 1)
        specials = special_values_batch()
        specials_same = {
            codec: stored(specials, root, codec, DEFAULT_ZSTD_LEVEL)[1]
            for codec in ("zstd", "none")
        }
        workdir = Path(args.workdir or os.path.join(root, "demo"))
        if not args.reuse:
            run_demo(workdir, args.steps)
        demo_on_disk, demo_saved, demo_steps, demo_files = demo_bytes(
            demo_recording(workdir)
        )
    print(
        "# NaN, +-inf, -0.0, subnormals in float32, bf16 and fp16: bitwise round "
        + ", ".join(f"trip with {c} {s}" for c, s in specials_same.items())
    )
    print(
        f"# demo recording: {demo_steps} steps, payloads {demo_on_disk} B on disk "
        f"for {demo_saved} B of torch.save; the whole recording (statistics, "
        f"stage digests, the trainer's log-probs, metadata) {demo_files / 2**10:.0f} "
        "KiB"
    )
    ratio, _, same = results[DEFAULT_ZSTD_LEVEL]  # what a dump uses by default
    emit(figure("stored_bytes_vs_torch_save[512x2048]", ratio, "<=", STORED_TARGET))
    emit(
        figure(
            "stored_bytes_vs_torch_save[demo]",
            demo_on_disk / demo_saved,
            "<=",
            STORED_TARGET,
        )
    )
    lossless = same and none_same and all(specials_same.values())
    emit(figure("lossless_round_trip", float(lossless), ">=", 1.0))
    emit(figure("uncompressed_codec_bytes_vs_torch_save", none_bytes / raw, "<=", 1.0))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
