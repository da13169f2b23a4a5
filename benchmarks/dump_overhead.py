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
  stand-in for the training loop runs while the writer is busy with a step than
  just before (median over 30 steps; the writer must not starve the training
  thread of the GIL).

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

from areal_debug.recording.writer import RecordingWriter, write_manifest  # noqa: E402

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


def new_writer(
    path: str, steps: int, clone: bool, writer_process: bool = True
) -> RecordingWriter:
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
        path,
        shard=0,
        num_shards=1,
        steps_per_epoch=steps,
        clone_tensors=clone,
        writer_process=writer_process,
    )


def sync_save_seconds(root: str, batch, steps: int) -> float:
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        torch.save(batch, os.path.join(root, f"sync-{i}.pt"))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def raw_write_seconds(path: str, data: bytes) -> float:
    """Write+fsync of ``data`` to a new file: what the disk itself does."""
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def time_dump(
    path: str, batch, raw: bytes, steps: int, clone: bool
) -> tuple[float, float, float]:
    """Medians per step: (blocked on the training thread, background write, raw
    write+fsync of the same bytes over the background write).

    Each step's raw write runs right before it, so both see the same disk (a
    virtual disk here alternates between its host's cache speed and its own).
    """
    writer = new_writer(path, steps, clone)
    blocked, write_times, ratios = [], [], []
    for i in range(steps):
        disk = raw_write_seconds(f"{path}.raw-{i}.bin", raw)
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        t1 = time.perf_counter()
        writer.flush()  # stands in for the training step, while the writer works
        blocked.append(t1 - t0)
        write_times.append(time.perf_counter() - t1)
        ratios.append(disk / write_times[-1])
    writer.close()
    return (
        statistics.median(blocked),
        statistics.median(write_times),
        statistics.median(ratios),
    )


def runqueue_wait() -> float | None:
    """Seconds this thread has spent runnable but waiting for a core (the
    kernel's schedstat); None where the kernel does not keep it."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def python_chunk(n: int = 2000, cpu: list | None = None) -> float:
    """Pure-Python work (dicts, ints, attribute look-ups): holds the GIL throughout.
    Its wall time; its thread's CPU time appended to ``cpu``."""
    c0, t0 = time.thread_time(), time.perf_counter()
    acc: dict[int, int] = {}
    for i in range(n):
        acc[i % 97] = acc.get(i % 97, 0) + (i * i) % 7
    wall = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(time.thread_time() - c0)
    return wall


def loop_slowdown(
    path: str, batch, steps: int, clone: bool, writer_process: bool = True
) -> tuple[float, float, float, float | None, float, float]:
    """How much slower the Python chunks run while the writer is busy with a
    step than in the idle window just before it: the median over steps of the
    per-step ratio minus 1 (idle and busy windows alternate, so each pair sees
    the same machine; this VM's other tenants come and go, and a median is not
    moved by the few windows they hit). Also: the same ratio pooled over all
    steps; the part of it the loop spent not running (waiting for the GIL or a
    core: wall minus thread CPU time), and of that the part spent waiting for a
    core (None where the kernel does not say); the writer's time per step beside
    that loop (the other side of the GIL); the loop time lost per step."""
    writer = new_writer(path, steps + 1, clone, writer_process)
    writer.submit_batch(0, batch)  # the writer process is up before measuring
    writer.flush()
    ratios: list[float] = []
    alone: list[float] = []
    busy: list[float] = []
    busy_cpu: list[float] = []
    busy_time = 0.0
    queued: float | None = 0.0
    for i in range(1, steps + 1):
        before, during = len(alone), len(busy)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.06:
            alone.append(python_chunk())
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        q0 = runqueue_wait()
        # unfinished_tasks: jobs queued or being written (Queue's own counter).
        while writer._queue.unfinished_tasks:
            busy.append(python_chunk(cpu=busy_cpu))
        q1 = runqueue_wait()
        queued = None if None in (queued, q0, q1) else queued + q1 - q0
        busy_time += time.perf_counter() - t0
        if len(busy) > during:
            idle_mean = statistics.fmean(alone[before:])
            ratios.append(statistics.fmean(busy[during:]) / idle_mean - 1.0)
    writer.close()
    alone_mean = statistics.fmean(alone)
    waiting = (sum(busy) - sum(busy_cpu)) / len(busy) / alone_mean
    if queued is not None:
        queued = queued / len(busy) / alone_mean
    pooled = statistics.fmean(busy) / alone_mean - 1.0
    lost = (sum(busy) - len(busy) * alone_mean) / steps
    return statistics.median(ratios), pooled, waiting, queued, busy_time / steps, lost


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
        dumps = {
            name: time_dump(os.path.join(root, name), batch, raw, args.steps, clone)
            for name, clone in PATHS
        }
        slowdowns = {
            name: loop_slowdown(os.path.join(root, f"gil-{name}"), batch, 30, clone)
            for name, clone in PATHS
        }
        # What the writer process saves: the same loop beside the writer thread.
        on_thread = loop_slowdown(
            os.path.join(root, "gil-thread"), batch, 12, False, writer_process=False
        )
    print(
        f"# batch: {args.prompts * args.group} sequences x {args.seqlen} tokens, "
        f"{len(raw) / 2**20:.1f} MiB torch.save, median of {args.steps} steps; "
        f"synchronous torch.save {sync * 1e3:.1f} ms"
    )
    for name, (block, write, ratio) in dumps.items():
        print(
            f"# [{name}] training thread blocked {block * 1e3:.2f} ms, background "
            f"write {write * 1e3:.1f} ms ({len(raw) / write / 2**20:.0f} MiB/s), "
            f"raw write+fsync of the same bytes {write * ratio * 1e3:.1f} ms"
        )
    for name, (block, _, _) in dumps.items():
        print(figure(f"dump_blocking_vs_sync_save[{name}]", block / sync, "<=", 0.05))
    # The slower of the two paths (the cpu one also copies).
    ratio = min(r for _, _, r in dumps.values())
    print(figure("background_write_throughput_vs_raw_disk", ratio, ">=", 1.0))
    for name, (slowdown, pooled, waiting, queued, per_step, lost) in slowdowns.items():
        split = (
            f" ({queued:.3f} waiting for a core, the rest for the GIL)"
            if queued is not None
            else " (waiting for the GIL or a core)"
        )
        print(
            f"# [{name}] beside the Python loop the writer took {per_step * 1e3:.0f} "
            f"ms per step ({dumps[name][1] * 1e3:.0f} ms alone), the loop losing "
            f"{lost * 1e3:.1f} ms of its time per step; pooled over all "
            f"steps the loop ran {pooled:.3f} slower, of which {waiting:.3f} was "
            f"time it did not run{split}, the rest its "
            "own code running slower beside the writer process (shared caches, "
            "memory bandwidth, the host)"
        )
        print(
            figure(f"python_loop_slowdown_while_writing[{name}]", slowdown, "<=", 0.03)
        )
    print(
        f"# [accelerator] with debug.writer_process=false (payloads stored on the "
        f"writer thread) the same loop is slowed by {on_thread[0]:.3f} (not running: "
        f"{on_thread[2]:.3f}), the writer taking {on_thread[4] * 1e3:.0f} ms per "
        "step beside it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
