# SPDX-License-Identifier: Apache-2.0
"""How small does a recording get, and at what CPU cost? (format v2 payload codecs)

Builds a realistically padded RLVR batch (benchmarks/rlvr_batch.py; default 64
prompts x 8 samples), stores it through the real RecordingWriter with each codec and
zstd level, and prints the stored bytes as a ratio to an uncompressed torch.save of
the same batch, the compression speed, and whether the round trip is bitwise.
Figures are printed as ``NAME: VALUE (target OP VALUE) ok|MISS``, measured once:
stored bytes and a bitwise round trip do not vary from run to run (the speeds,
which do, are context); lines starting with ``#`` are context.

    .venv/bin/python benchmarks/compression.py [--prompts 64] [--group 8]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time

import torch
import zstandard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import figure  # noqa: E402
from rlvr_batch import padded_rlvr_batch  # noqa: E402

from areal_debug.recording.format import DEFAULT_ZSTD_LEVEL  # noqa: E402
from areal_debug.recording.reader import RecordingReader  # noqa: E402
from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402

LEVELS = (-3, -1, 1, 3, 6, 10)


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
        a.keys() == b.keys()
        and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
        for a, b in zip(batch, loaded, strict=True)
    )
    return nbytes, same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    args = ap.parse_args(argv)
    logging.getLogger("DebugDump").setLevel(logging.WARNING)
    batch = padded_rlvr_batch(args.prompts, args.group)
    buf = io.BytesIO()
    torch.save(batch, buf)
    raw = buf.getvalue()
    tokens = sum(int(t["attention_mask"].sum()) for t in batch)
    padded = sum(t["attention_mask"].numel() for t in batch)
    print(
        f"# batch: {args.prompts} x {args.group} sequences, {tokens} tokens, "
        f"{1 - tokens / padded:.0%} padding; torch.save {len(raw) / 2**20:.1f} MiB"
    )
    results = {}
    with tempfile.TemporaryDirectory() as root:
        for level in LEVELS:
            t0 = time.perf_counter()
            zstandard.ZstdCompressor(level=level).compress(raw)
            speed = len(raw) / (time.perf_counter() - t0) / 2**20
            nbytes, same = stored(batch, root, "zstd", level)
            results[level] = (nbytes / len(raw), speed, same)
            print(
                f"# zstd level {level}: {nbytes / len(raw):.4f} of torch.save, "
                f"compresses {speed:.0f} MiB/s, bitwise round trip {same}"
            )
        none_bytes, none_same = stored(batch, root, "none", 1)
    ratio, _, same = results[DEFAULT_ZSTD_LEVEL]  # what a dump uses by default
    print(figure("stored_bytes_vs_torch_save", ratio, "<=", 0.2))
    print(figure("lossless_round_trip", float(same and none_same), ">=", 1.0))
    print(
        figure(
            "uncompressed_codec_bytes_vs_torch_save", none_bytes / len(raw), "<=", 1.0
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
