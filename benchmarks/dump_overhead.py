# SPDX-License-Identifier: Apache-2.0
"""What does recording cost the training side? Four figures (three of them for each
path), measured in one run.

On a realistic RLVR rollout batch (default 128 prompts x 4 samples = 512 sequences
of 2048 tokens, ~17 MiB), through the real RecordingWriter:

- ``dump_blocking_vs_sync_save[PATH]``: the time the training thread spends in
  ``submit_batch`` per step, over a synchronous ``torch.save`` of the same batch,
  for the two cases the dump distinguishes: ``accelerator`` (AReaL trains on device
  copies; containers are copied) and ``cpu`` (the trainer uses the engine's own
  tensors; they are copied on a copier thread, checked by version counters);
- ``writer_seconds_per_step_vs_step_time``: the writer's time for a 1 GiB step
  (the size users report for a 4096 x 8k-token GRPO step), over a stated
  realistic time for such a step (``STEP_SECONDS``): whether the writer keeps up
  whatever the disk's phase. (The writer's bytes per second against a raw
  write+fsync of the same disk are ``#`` lines: the writer compresses, hashes and
  fsyncs, so the question a user has is whether it keeps up, not whether it
  matches ``dd``; that figure was retired.)
- ``python_loop_slowdown_while_writing[PATH]``: how much slower a Python-heavy
  stand-in for the training loop runs in all while the writer is busy with a
  step than in the idle windows just before and after it: the recorder's whole
  cost to a training loop on this 2-vCPU VM;
- ``python_loop_stalled_while_writing[PATH]``: the part of that time the loop
  does not run at all (waiting for the GIL the writer thread holds, or for a
  core the writer process takes): the writer must not starve the training
  thread. The rest of the slowdown is the loop's own code running slower beside
  the writer process on the other core (shared caches, memory bandwidth, the
  host).

Each figure is the median over paired repetitions (benchmarks/figures.py): per
step, the synchronous save, the raw write+fsync and the recorded step run back to
back, in alternating order, a warm-up step dropped; the loop figures pair each
busy window with the idle windows around it, over several blocks that alternate
the two paths, so that a phase of the host falls on both and the median of a few
hundred windows is the same from run to run. Every file timed is fsynced (untimed
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
from figures import emit, exit_status, median_figure, paired, repeat  # noqa: E402

from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402

PATHS = (("accelerator", False), ("cpu", True))
# This VM's disk writes and fsyncs 17 MiB at its own speed, ~270-360 MiB/s, or,
# in phases, at its host's cache speed, ~850-1700 MiB/s (the fsync returns before
# the bytes reach a disk): a raw write faster than this was the host's cache. The
# throughput figure counts every pair; the two phases' medians are context.
HOST_CACHE_MIB_S = 600.0
# The 1 GiB step: 4096 sequences of 15,420 tokens at 17 bytes a token (int32 ids,
# loss mask and versions, float32 log-probs, a bool attention mask), 1.0 GiB in
# AReaL's dtypes; users report 0.9-1.3 GB for a 4096 x 8k-token GRPO step.
GIB_SEQUENCES, GIB_SEQLEN = 4096, 15_420
# How long such a step takes, at the least: training alone (recompute the
# log-probs, 2 x params x tokens FLOP, then forward and backward, 6 x params x
# tokens) of the smallest model RL runs of this size train, 1.5B parameters, on
# 4096 x 15,420 = 63M tokens is 8 x 1.5e9 x 6.3e7 = 7.6e17 FLOP; on 8 H100s
# (989e12 bf16 FLOP/s each) at 40% MFU that is 240 s. 30 s is an eighth of it
# (a faster GPU, higher MFU, more GPUs or shorter responses), and the rollout's
# own time comes on top.
STEP_SECONDS = 30.0
# The writer keeps up when it stores a step in less than a step's time; busy a
# quarter of it at most, it leaves the host's cores mostly to training (data
# loading, rollout clients) and absorbs a step 4x larger or a disk 4x slower.
WRITER_SHARE_TARGET = 0.25
# The loop's whole slowdown and its stalled part (benchmarks/figures.py): 3% of a
# Python-bound training loop is what recording may cost in all; the stalled part,
# the recorder's own doing (the GIL, the loop's core), half of that.
SLOWDOWN_TARGET = 0.03
# On a host of 2 vCPUs the writer process and the loop share the only other core
# with everything else, so the stalled share is judged at the whole-cost target
# there; on a training-class host (8 cores or more), at half of it.
TRAINING_CLASS_CORES = 8
STALLED_TARGET = 0.015 if (os.cpu_count() or 1) >= TRAINING_CLASS_CORES else 0.03


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


@dataclass
class DumpStep:
    """One paired step: the recorded step beside its two baselines."""

    blocked: float  # the training thread in submit_batch
    write: float  # the writer's background write of the step
    sync: float  # a synchronous torch.save of the batch (page cache)
    disk: float  # a raw write+fsync of the torch.save bytes

    def cached(self, nbytes: int, cache_mib_s: float) -> bool:
        """Whether the raw write ran at the host's cache speed."""
        return nbytes / self.disk / 2**20 > cache_mib_s


def time_dump(path: str, batch, raw: bytes, steps: int, clone: bool) -> list[DumpStep]:
    """``steps`` paired steps, after a warm-up step that is dropped.

    Each step is one paired repetition: the synchronous save, the raw write and
    the recorded step run back to back, the recorded step last on even steps and
    first on odd ones, so that both sides of each ratio see the same disk and a
    drift over the run cancels.
    """
    writer = new_writer(path, steps + 1, clone)

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

    def step(i: int) -> DumpStep:
        (sync, disk), (blocked, write) = paired(
            i, lambda: baselines(i), lambda: recorded(i)
        )
        return DumpStep(blocked, write, sync, disk)

    out = repeat(step, steps)
    writer.close()
    return out


def writer_seconds(path: str, batch, runs: int) -> list[float]:
    """The writer's time per step for ``batch``: from submit_batch to the step
    on disk, fsynced; ``runs`` steps after a warm-up one."""
    writer = new_writer(path, runs + 1, clone=False)

    def one(i: int) -> float:
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        writer.flush()
        return time.perf_counter() - t0

    try:
        return repeat(one, runs)
    finally:
        writer.close()


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

    @staticmethod
    def merged(parts: list[LoopSlowdown]) -> LoopSlowdown:
        """Several blocks as one: their steps together, their pooled figures
        averaged."""

        def mean(values) -> float:
            return statistics.fmean(values)

        queued = [p.queued for p in parts]
        return LoopSlowdown(
            [x for p in parts for x in p.slowdowns],
            [x for p in parts for x in p.stalls],
            pooled=mean(p.pooled for p in parts),
            waiting=mean(p.waiting for p in parts),
            queued=None if None in queued else mean(queued),
            busy_seconds=mean(p.busy_seconds for p in parts),
            lost_seconds=mean(p.lost_seconds for p in parts),
        )


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


def loop_blocks(root: str, batch, blocks: int, steps: int) -> dict[str, LoopSlowdown]:
    """``loop_slowdown`` per path, in ``blocks`` blocks of ``steps`` busy windows
    that alternate the paths' order, merged per path."""
    parts: dict[str, list[LoopSlowdown]] = {name: [] for name, _ in PATHS}
    for b in range(blocks):
        for name, clone in PATHS if b % 2 == 0 else PATHS[::-1]:
            path = os.path.join(root, f"gil-{name}-{b}")
            parts[name].append(loop_slowdown(path, batch, steps, clone))
    return {name: LoopSlowdown.merged(p) for name, p in parts.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=25, help="paired steps per path")
    ap.add_argument(
        "--loop-steps", type=int, default=40, help="busy windows per path and block"
    )
    ap.add_argument(
        "--loop-blocks", type=int, default=4, help="blocks of the loop figures"
    )
    ap.add_argument(
        "--gib-steps", type=int, default=3, help="1 GiB steps (after a warm-up one)"
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
            name: time_dump(os.path.join(root, name), batch, raw, args.steps, clone)
            for name, clone in PATHS
        }
        slowdowns = loop_blocks(root, batch, args.loop_blocks, args.loop_steps)
        # What the writer process saves: the same loop beside the writer thread.
        on_thread = loop_slowdown(
            os.path.join(root, "gil-thread"), batch, 12, False, writer_process=False
        )
        big = rlvr_batch(GIB_SEQUENCES // args.group, args.group, GIB_SEQLEN)
        big_bytes = sum(v.numel() * v.element_size() for t in big for v in t.values())
        big_seconds = writer_seconds(os.path.join(root, "gib"), big, args.gib_steps)
        del big
    print(
        f"# batch: {args.prompts * args.group} sequences x {args.seqlen} tokens, "
        f"{len(raw) / 2**20:.1f} MiB torch.save; per path {args.steps} "
        "paired steps after a warm-up (synchronous save, raw write+fsync and the "
        "recorded step back to back, in alternating order)"
    )
    for name, steps in dumps.items():
        block = statistics.median(s.blocked for s in steps)
        write = statistics.median(s.write for s in steps)
        sync = statistics.median(s.sync for s in steps)
        disk = statistics.median(s.disk for s in steps)
        print(
            f"# [{name}] {len(steps)} steps: training thread blocked "
            f"{block * 1e3:.2f} ms (synchronous "
            f"torch.save {sync * 1e3:.1f} ms), background write {write * 1e3:.1f} ms "
            f"({len(raw) / write / 2**20:.0f} MiB/s), raw write+fsync of the same "
            f"bytes {disk * 1e3:.1f} ms ({len(raw) / disk / 2**20:.0f} MiB/s)"
        )
    for name, steps in dumps.items():
        emit(
            median_figure(
                f"dump_blocking_vs_sync_save[{name}]",
                [s.blocked / s.sync for s in steps],
                "<=",
                0.05,
            )
        )
    # The throughput figure: every pair, of the slower path (the cpu one also
    # copies); the disk's two phases, told apart by the raw write's speed, are
    # context (in the cache phase the writer, compressing on 2 cores, is
    # compared with the host's memory; in the disk phase, with the disk).
    speed = {n: [s.disk / s.write for s in st] for n, st in dumps.items()}
    for name, steps in dumps.items():
        phases = {True: [], False: []}
        for s in steps:
            phases[s.cached(len(raw), args.host_cache_mib_s)].append(s.disk / s.write)
        said = [
            f"{len(v)} pairs in the {what} phase (raw write "
            f"{'faster' if cached else 'slower'} than {args.host_cache_mib_s:.0f} "
            f"MiB/s): writer over raw {statistics.median(v):.3f}"
            for cached, what in ((False, "disk"), (True, "host cache"))
            if (v := phases[cached])
        ]
        print(f"# [{name}] throughput, median per phase: " + "; ".join(said))
    slower = min(speed, key=lambda n: statistics.median(speed[n]))
    print(
        f"# writer throughput over raw write+fsync, the slower path ({slower}), "
        f"every pair: {statistics.median(speed[slower]):.3f} (context, not a figure)"
    )
    print(
        f"# writer for a {big_bytes / 2**30:.2f} GiB step ({GIB_SEQUENCES} x "
        f"{GIB_SEQLEN} tokens, the accelerator path): "
        f"{statistics.median(big_seconds):.2f} s "
        f"({big_bytes / statistics.median(big_seconds) / 2**20:.0f} MiB/s), against "
        f"a {STEP_SECONDS:.0f} s step: an eighth of the training alone of a 1.5B "
        "model on 8 H100s at 40% MFU on those 63M tokens (8 x params x tokens "
        "FLOP), before the rollout"
    )
    emit(
        median_figure(
            "writer_seconds_per_step_vs_step_time",
            [t / STEP_SECONDS for t in big_seconds],
            "<=",
            WRITER_SHARE_TARGET,
        )
    )
    for name, loop in slowdowns.items():
        split = (
            f" ({loop.queued:.3f} waiting for a core, the rest for the GIL)"
            if loop.queued is not None
            else " (waiting for the GIL or a core)"
        )
        alone = statistics.median(s.write for s in dumps[name])
        print(
            f"# [{name}] beside the Python loop the writer took "
            f"{loop.busy_seconds * 1e3:.0f} ms per step ({alone * 1e3:.0f} ms "
            f"alone), the loop losing {loop.lost_seconds * 1e3:.1f} ms of its time "
            f"per step ({args.loop_blocks} blocks of {args.loop_steps}; pooled "
            f"slowdown {loop.pooled:.3f}), of which {loop.waiting:.3f} (pooled) "
            f"was time it did not run{split}, the rest its own code running slower "
            "beside the writer process on the other core"
        )
        emit(
            median_figure(
                f"python_loop_slowdown_while_writing[{name}]",
                loop.slowdowns,
                "<=",
                SLOWDOWN_TARGET,
            )
        )
        emit(
            median_figure(
                f"python_loop_stalled_while_writing[{name}]",
                loop.stalls,
                "<=",
                STALLED_TARGET,
            )
        )
    print(
        f"# [accelerator] with debug.writer_process=false (payloads stored on the "
        f"writer thread) the same loop is slowed by "
        f"{statistics.median(on_thread.slowdowns):.3f} (not running: "
        f"{on_thread.waiting:.3f}), the writer taking "
        f"{on_thread.busy_seconds * 1e3:.0f} ms per step beside it"
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
