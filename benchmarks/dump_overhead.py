# SPDX-License-Identifier: Apache-2.0
"""What does recording cost the training side? Three figures, measured in one run.

On a realistic RLVR rollout batch (default 128 prompts x 4 samples = 512 sequences
of 2048 tokens, ~17 MiB), through the real RecordingWriter:

- ``dump_blocking_vs_sync_save[PATH]``: the median time the training thread spends
  in ``submit_batch`` per step, over a synchronous ``torch.save`` of the same batch,
  for the two cases the dump distinguishes: ``accelerator`` (AReaL trains on device
  copies; containers are copied) and ``cpu`` (the trainer uses the engine's own
  tensors; they are copied on a copier thread, checked by version counters);
- ``background_write_throughput_vs_raw_disk``: uncompressed bytes per second the
  writer stores (serialise, compress, hash, write, fsync), over the raw
  write+fsync speed of the same disk for the same bytes, measured here;
- ``python_loop_slowdown_while_writing[PATH]``: how much slower a Python-heavy
  stand-in for the training loop runs while the writer is busy (the writer must
  not starve the training thread of the GIL).

Figures: ``NAME: VALUE (target OP VALUE) ok|MISS``; ``#`` lines are context.

    .venv/bin/python benchmarks/dump_overhead.py [--prompts 128] [--group 4] [--seqlen 2048]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import figure  # noqa: E402

from areal_debug.store_writer import RecordingWriter, write_manifest  # noqa: E402

PATHS = (("accelerator", False), ("cpu", True))


def rlvr_batch(prompts: int, group: int, seqlen: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    batch = []
    for _ in range(prompts):
        prompt_len = int(torch.randint(64, 512, (1,), generator=g))
        versions = torch.full((group, seqlen), 3, dtype=torch.int32)
        versions[:, :prompt_len] = -1
        loss_mask = torch.ones(group, seqlen, dtype=torch.int32)
        loss_mask[:, :prompt_len] = 0
        batch.append(
            {
                "input_ids": torch.randint(
                    0, 150_000, (group, seqlen), generator=g, dtype=torch.int32
                ),
                "loss_mask": loss_mask,
                "logprobs": -torch.rand(group, seqlen, generator=g),
                "versions": versions,
                "attention_mask": torch.ones(group, seqlen, dtype=torch.bool),
                "rewards": torch.rand(group, generator=g),
            }
        )
    return batch


def new_writer(path: str, steps: int, clone: bool) -> RecordingWriter:
    write_manifest(
        path,
        {
            "format_version": 2,
            "created": "bench",
            "experiment_name": "b",
            "trial_name": "b",
            "layout": {"num_shards": 1, "steps_per_epoch": steps},
        },
    )
    return RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=steps, clone_tensors=clone
    )


def sync_save_seconds(root: str, batch, steps: int) -> float:
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        torch.save(batch, os.path.join(root, f"sync-{i}.pt"))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def raw_disk_seconds(root: str, data: bytes, steps: int) -> float:
    """Write+fsync of ``data`` to a new file: what the disk itself does."""
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        with open(os.path.join(root, f"raw-{i}.bin"), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_dump(path: str, batch, steps: int, clone: bool) -> tuple[float, float]:
    """Median (blocked on the training thread, background write) per step."""
    writer = new_writer(path, steps, clone)
    blocked, write_times = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        t1 = time.perf_counter()
        writer.flush()  # stands in for the training step, while the writer works
        blocked.append(t1 - t0)
        write_times.append(time.perf_counter() - t1)
    writer.close()
    return statistics.median(blocked), statistics.median(write_times)


def python_chunk(n: int = 2000) -> float:
    """Pure-Python work (dicts, ints, attribute look-ups): holds the GIL throughout."""
    t0 = time.perf_counter()
    acc: dict[int, int] = {}
    for i in range(n):
        acc[i % 97] = acc.get(i % 97, 0) + (i * i) % 7
    return time.perf_counter() - t0


def loop_slowdown(path: str, batch, steps: int, clone: bool) -> tuple[float, float]:
    """Mean Python chunk time while the writer is busy over the mean alone, minus
    1; and the writer's time per step beside that loop (the other side of the GIL)."""
    alone = [python_chunk() for _ in range(600)]
    writer = new_writer(path, steps, clone)
    busy: list[float] = []
    t0 = time.perf_counter()
    for i in range(steps):
        writer.submit_batch(i, batch)
        # unfinished_tasks: jobs queued or being written (Queue's own counter).
        while writer._queue.unfinished_tasks:
            busy.append(python_chunk())
    per_step = (time.perf_counter() - t0) / steps
    writer.close()
    alone += [python_chunk() for _ in range(600)]
    return statistics.fmean(busy) / statistics.fmean(alone) - 1.0, per_step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args(argv)
    logging.getLogger("DebugDump").setLevel(logging.WARNING)

    batch = rlvr_batch(args.prompts, args.group, args.seqlen)
    buf = io.BytesIO()
    torch.save(batch, buf)
    raw = buf.getvalue()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        sync = sync_save_seconds(root, batch, args.steps)
        disk = raw_disk_seconds(root, raw, args.steps)
        dumps = {
            name: time_dump(os.path.join(root, name), batch, args.steps, clone)
            for name, clone in PATHS
        }
        slowdowns = {
            name: loop_slowdown(os.path.join(root, f"gil-{name}"), batch, 4, clone)
            for name, clone in PATHS
        }
    print(
        f"# batch: {args.prompts * args.group} sequences x {args.seqlen} tokens, "
        f"{len(raw) / 2**20:.1f} MiB torch.save, median of {args.steps} steps; "
        f"synchronous torch.save {sync * 1e3:.1f} ms, raw write+fsync "
        f"{disk * 1e3:.1f} ms ({len(raw) / disk / 2**20:.0f} MiB/s)"
    )
    for name, (block, write) in dumps.items():
        print(
            f"# [{name}] training thread blocked {block * 1e3:.2f} ms, background "
            f"write {write * 1e3:.1f} ms ({len(raw) / write / 2**20:.0f} MiB/s)"
        )
    for name, (block, _) in dumps.items():
        print(figure(f"dump_blocking_vs_sync_save[{name}]", block / sync, "<=", 0.05))
    # The slower of the two paths' writes (the cpu one also copies).
    write = max(w for _, w in dumps.values())
    print(figure("background_write_throughput_vs_raw_disk", disk / write, ">=", 1.0))
    for name, (slowdown, per_step) in slowdowns.items():
        print(
            f"# [{name}] beside the Python loop the writer took {per_step * 1e3:.0f} ms "
            f"per step ({dumps[name][1] * 1e3:.0f} ms alone): each time it takes the "
            "GIL back it may wait up to sys.getswitchinterval() "
            f"({sys.getswitchinterval() * 1e3:.0f} ms)"
        )
        print(
            figure(f"python_loop_slowdown_while_writing[{name}]", slowdown, "<=", 0.03)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
