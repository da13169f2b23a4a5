# SPDX-License-Identifier: Apache-2.0
"""What does recording cost the training side? Three figures, measured in one run.

On a realistic RLVR rollout batch (default 128 prompts x 4 samples = 512 sequences
of 2048 tokens, ~17 MiB), through the real RecordingWriter:

- ``dump_blocking_vs_sync_save[PATH]``: the time the training thread spends in
  ``submit_batch`` per step, over a synchronous ``torch.save`` of the same batch,
  for the two cases the dump distinguishes: ``accelerator`` (AReaL trains on device
  copies; containers are copied) and ``cpu`` (the trainer uses the engine's own
  tensors; they are copied on a copier thread, checked by version counters);
- ``background_write_throughput_vs_raw_disk``: uncompressed bytes per second the
  writer stores (serialise, compress, hash, write, fsync), over the raw
  write+fsync speed of the same disk for the same bytes, measured here;
- ``python_loop_stalled_while_writing[PATH]``: the share of its time a
  Python-heavy stand-in for the training loop does not run at all (waiting for
  the GIL the writer thread holds, or for a core the writer process takes) while
  the writer is busy with a step, beyond the idle windows just before and after
  it: the writer must not starve the training thread. How much slower the loop
  runs in all (its own code also runs slower beside the writer process on the
  other core, by an amount this VM's host decides from run to run) is a ``#``
  line, with its spread and the loop time lost per step.

Each figure is the median over paired repetitions (benchmarks/figures.py): per
step, the synchronous save, the raw write+fsync and the recorded step run back to
back, in alternating order, a warm-up step dropped; the loop figure pairs each
busy window with the idle windows around it. Every file timed is fsynced (untimed
where the baseline does not fsync) and removed, so that the kernel's writeback of
one measurement never lands in the next.

Figures: ``NAME: VALUE (median of N, range LO to HI; target OP VALUE) ok|MISS``; ``#``
lines are context.

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
from dataclasses import dataclass, field

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import median_figure, paired, repeat  # noqa: E402

from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402

PATHS = (("accelerator", False), ("cpu", True))
# This VM's disk writes and fsyncs 17 MiB at its own speed, ~270-360 MiB/s, or,
# in phases, at its host's cache speed, ~850-1700 MiB/s (the fsync returns before
# the bytes reach a disk): a raw write faster than this was the host's cache.
HOST_CACHE_MIB_S = 600.0


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


def sync_save_seconds(path: str, batch) -> float:
    """A synchronous ``torch.save`` of ``batch``: what the training thread would
    pay saving inline (into the page cache, no fsync). Its pages are then written
    out and the file removed, untimed, so that no dirty pages of it are left for
    the kernel to write back during the next measurement."""
    t0 = time.perf_counter()
    torch.save(batch, path)
    took = time.perf_counter() - t0
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    os.remove(path)
    return took


def raw_write_seconds(path: str, data: bytes) -> float:
    """Write+fsync of ``data`` to a new file: what the disk itself does (the file
    is removed afterwards, untimed)."""
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    took = time.perf_counter() - t0
    os.remove(path)
    return took


def time_dump(
    path: str, batch, raw: bytes, steps: int, clone: bool, cache_mib_s: float
) -> list[tuple[float, float, float, float, bool]]:
    """Per step (a warm-up step dropped): (blocked on the training thread over a
    synchronous torch.save, the raw write+fsync of the same bytes over the
    background write, blocked seconds, background write seconds, whether the raw
    write ran at the host's cache speed, faster than ``cache_mib_s``).

    Each step is one paired repetition: the synchronous save, the raw write and
    the recorded step run back to back, the recorded step last on even steps and
    first on odd ones, so that both sides of each ratio see the same disk and a
    drift over the run cancels. This VM's disk alternates between its host's
    cache speed and its own: steps are added (up to 3x ``steps``) until
    ``steps`` of them saw the disk itself.
    """
    writer = new_writer(path, 3 * steps + 1, clone)

    def recorded(i: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        t1 = time.perf_counter()
        writer.flush()  # stands in for the training step, while the writer works
        return t1 - t0, time.perf_counter() - t1

    def baselines(i: int) -> tuple[float, float]:
        return (
            sync_save_seconds(f"{path}.sync-{i}.pt", batch),
            raw_write_seconds(f"{path}.raw-{i}.bin", raw),
        )

    def step(i: int) -> tuple[float, float, float, float, bool]:
        (sync, disk), (blocked, write) = paired(
            i, lambda: baselines(i), lambda: recorded(i)
        )
        cached = len(raw) / disk / 2**20 > cache_mib_s
        return blocked / sync, disk / write, blocked, write, cached

    out = repeat(step, steps)
    i = steps + 1
    while sum(not s[4] for s in out) < steps and i <= 3 * steps:
        out.append(step(i))
        i += 1
    writer.close()
    return out


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


@dataclass
class Windows:
    """The Python chunks of one stretch of the loop: their wall times, and the
    part of it the loop did not run (waiting for the GIL or a core)."""

    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def run_one(self) -> None:
        self.walls.append(python_chunk(cpu=self.cpus))

    def __add__(self, other: Windows) -> Windows:
        return Windows(self.walls + other.walls, self.cpus + other.cpus)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.walls)

    @property
    def stalled(self) -> float:
        """Wall time not spent running, per chunk."""
        return (sum(self.walls) - sum(self.cpus)) / len(self.walls)


@dataclass
class LoopSlowdown:
    """The Python loop beside the writer, per busy window (a recorded step) and
    the idle windows on both sides of it."""

    # Per step: how much slower the loop ran (wall time), and how much of its
    # time it did not run at all beyond what it did not run when idle.
    slowdowns: list[float]
    stalls: list[float]
    # Pooled over all steps: the slowdown, and the not-running part of it.
    pooled: float
    waiting: float
    # Of ``waiting``, the part spent waiting for a core (None: not known here).
    queued: float | None
    # Per step: the writer's time beside the loop, and the loop time lost.
    busy_seconds: float
    lost_seconds: float


def loop_slowdown(
    path: str, batch, steps: int, clone: bool, writer_process: bool = True
) -> LoopSlowdown:
    """How much slower the Python chunks run while the writer is busy with a
    step than in the idle windows just before and just after it (the idle
    windows on both sides of each busy one, so that each pair sees the same
    machine and a drift over the window cancels; this VM's other tenants come
    and go, and a median over steps is not moved by the few windows they hit).

    Two parts: the time the loop does not run (the writer thread holding the
    GIL, the writer process on the loop's core), which is the recorder's own
    doing, and its code running slower beside the writer process on the other
    core (shared caches, memory bandwidth, the host), which any work beside
    training costs on this VM and which varies from run to run with the host.
    """
    writer = new_writer(path, steps + 1, clone, writer_process)
    writer.submit_batch(0, batch)  # the writer process is up before measuring
    writer.flush()

    def idle_window() -> Windows:
        window = Windows()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.06:
            window.run_one()
        return window

    idle = [idle_window()]
    busy: list[Windows] = []
    busy_time = 0.0
    queued: float | None = 0.0
    for i in range(1, steps + 1):
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        q0 = runqueue_wait()
        window = Windows()
        # unfinished_tasks: jobs queued or being written (Queue's own counter).
        while writer._queue.unfinished_tasks:
            window.run_one()
        q1 = runqueue_wait()
        queued = None if None in (queued, q0, q1) else queued + q1 - q0
        busy_time += time.perf_counter() - t0
        busy.append(window)
        idle.append(idle_window())
    writer.close()
    slowdowns, stalls = [], []
    for before, during, after in zip(idle, busy, idle[1:]):
        if not during.walls:
            continue
        around = before + after
        slowdowns.append(during.mean / around.mean - 1.0)
        stalls.append((during.stalled - around.stalled) / around.mean)
    alone = sum(idle, Windows()).mean
    busy_all = sum(busy, Windows())
    n = len(busy_all.walls)
    if queued is not None:
        queued = queued / n / alone
    return LoopSlowdown(
        slowdowns,
        stalls,
        pooled=busy_all.mean / alone - 1.0,
        waiting=busy_all.stalled / alone,
        queued=queued,
        busy_seconds=busy_time / steps,
        lost_seconds=(sum(busy_all.walls) - n * alone) / steps,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=15, help="paired steps per path")
    ap.add_argument(
        "--loop-steps", type=int, default=40, help="busy windows per path (GIL figure)"
    )
    ap.add_argument(
        "--host-cache-mib-s",
        type=float,
        default=HOST_CACHE_MIB_S,
        help="a raw write+fsync faster than this was taken by the host's cache",
    )
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args(argv)
    logging.getLogger("DebugDump").setLevel(logging.WARNING)

    batch = rlvr_batch(args.prompts, args.group, args.seqlen)
    buf = io.BytesIO()
    torch.save(batch, buf)
    raw = buf.getvalue()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        os.sync()  # nothing written before is left for writeback to do meanwhile
        dumps = {
            name: time_dump(
                os.path.join(root, name),
                batch,
                raw,
                args.steps,
                clone,
                args.host_cache_mib_s,
            )
            for name, clone in PATHS
        }
        slowdowns = {
            name: loop_slowdown(
                os.path.join(root, f"gil-{name}"), batch, args.loop_steps, clone
            )
            for name, clone in PATHS
        }
        # What the writer process saves: the same loop beside the writer thread.
        on_thread = loop_slowdown(
            os.path.join(root, "gil-thread"), batch, 12, False, writer_process=False
        )
    print(
        f"# batch: {args.prompts * args.group} sequences x {args.seqlen} tokens, "
        f"{len(raw) / 2**20:.1f} MiB torch.save; per path at least {args.steps} "
        "paired steps after a warm-up (synchronous save, raw write+fsync and the "
        "recorded step back to back, in alternating order)"
    )
    for name, steps in dumps.items():
        block = statistics.median(s[2] for s in steps)
        write = statistics.median(s[3] for s in steps)
        sync = statistics.median(s[2] / s[0] for s in steps)
        disk = statistics.median(s[1] * s[3] for s in steps)
        print(
            f"# [{name}] {len(steps)} steps: training thread blocked "
            f"{block * 1e3:.2f} ms (synchronous "
            f"torch.save {sync * 1e3:.1f} ms), background write {write * 1e3:.1f} ms "
            f"({len(raw) / write / 2**20:.0f} MiB/s), raw write+fsync of the same "
            f"bytes {disk * 1e3:.1f} ms ({len(raw) / disk / 2**20:.0f} MiB/s)"
        )
    for name, steps in dumps.items():
        print(
            median_figure(
                f"dump_blocking_vs_sync_save[{name}]", [s[0] for s in steps], "<=", 0.05
            )
        )
    # The throughput figure compares the writer with the disk: the steps whose
    # raw write the host's cache took are context (there the writer, compressing
    # on 2 cores, is compared with the host's memory).
    for name, steps in dumps.items():
        cached = [s[1] for s in steps if s[4]]
        if cached:
            print(
                f"# [{name}] {len(cached)} of {len(steps)} steps the raw write ran "
                f"faster than {args.host_cache_mib_s:.0f} MiB/s (the host's cache, "
                f"not the disk): writer over that {statistics.median(cached):.3f} "
                "(median), left out of the throughput figure"
            )
    disk_steps = {n: [s for s in st if not s[4]] for n, st in dumps.items()}
    # Fewer than --steps such pairs in 3x --steps: the disk stayed in its cache
    # phase, and the few slower raw writes are stragglers of it, not the disk.
    if all(len(st) >= args.steps for st in disk_steps.values()):
        # The slower of the two paths (the cpu one also copies).
        slower = min(
            disk_steps, key=lambda n: statistics.median(s[1] for s in disk_steps[n])
        )
        print(f"# writer throughput: the slower path, {slower}")
        print(
            median_figure(
                "background_write_throughput_vs_raw_disk",
                [s[1] for s in disk_steps[slower]],
                ">=",
                1.0,
            )
        )
    else:
        print(
            "# background_write_throughput_vs_raw_disk not measured: the host's "
            f"cache took the raw writes (fewer than {args.steps} of "
            f"{3 * args.steps} steps saw the disk itself: the disk's cache phase; "
            "run again later)"
        )
    for name, loop in slowdowns.items():
        split = (
            f" ({loop.queued:.3f} waiting for a core, the rest for the GIL)"
            if loop.queued is not None
            else " (waiting for the GIL or a core)"
        )
        alone = statistics.median(s[3] for s in dumps[name])
        print(
            f"# [{name}] beside the Python loop the writer took "
            f"{loop.busy_seconds * 1e3:.0f} ms per step ({alone * 1e3:.0f} ms "
            f"alone), the loop losing {loop.lost_seconds * 1e3:.1f} ms of its time "
            f"per step; the loop ran {statistics.median(loop.slowdowns):.3f} slower "
            f"(median of {len(loop.slowdowns)} steps, range "
            f"{min(loop.slowdowns):.3f} to {max(loop.slowdowns):.3f}; pooled "
            f"{loop.pooled:.3f}), of which {loop.waiting:.3f} (pooled) was time it "
            f"did not run{split}, the rest its own code running slower beside the "
            "writer process on the other core"
        )
        print(
            median_figure(
                f"python_loop_stalled_while_writing[{name}]", loop.stalls, "<=", 0.03
            )
        )
    print(
        f"# [accelerator] with debug.writer_process=false (payloads stored on the "
        f"writer thread) the same loop is slowed by "
        f"{statistics.median(on_thread.slowdowns):.3f} (not running: "
        f"{on_thread.waiting:.3f}), the writer taking "
        f"{on_thread.busy_seconds * 1e3:.0f} ms per step beside it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
