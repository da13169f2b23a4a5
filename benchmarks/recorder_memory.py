# SPDX-License-Identifier: Apache-2.0
"""How much memory does the recorder hold? The training process's pending steps,
and the writer process, at a 17 MiB step.

Through the real RecordingWriter with its writer process (as a dump runs it), the
17 MiB batch of ``dump_overhead.py`` (512 x 2048 tokens in AReaL's dtypes) is
submitted as fast as the training thread can, step after step, so the queue stays
full (``max_pending`` steps wait while one is written): the most a slow disk can
make the recorder hold. The batch is copied at each submit (the ``cpu`` path:
AReaL trains on the engine's own tensors); on an accelerator the recorder copies
no tensors but keeps the batch AReaL dropped alive until it is written, the same
bytes.

Memory is PSS (``/proc/PID/smaps_rollup``): the pages both processes map (the
shared-memory arena the payloads cross in, torch's libraries) are split between
them, so the two processes' PSS add up to the memory they take together, each
page once. Sampled every 10 ms; the figure is the peak of that sum above the
training process's PSS before the writer started: all the memory recording adds.
(The training process's own PSS can fall meanwhile: the writer process shares
its libraries' pages, and takes half of them.)

``recorder_rss_mib`` target 512 MiB: an 8-GPU node has 1-2 TiB of host memory
(128-256 GiB a GPU, one training process each); a recorder left on for a whole run
must stay a rounding error of it (0.4% of 128 GiB), whatever the disk's speed.

    .venv/bin/python benchmarks/recorder_memory.py [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_overhead import new_writer, rlvr_batch  # noqa: E402
from figures import emit, exit_status, figure  # noqa: E402

MIB = 2**20


def smaps_mib(pid: int, *fields: str) -> float:
    """The sum of ``fields`` of the process's ``smaps_rollup``, 0 once it ended."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    kib = sum(
        int(line.split()[1])
        for line in text.splitlines()
        if line.split(":")[0] in fields
    )
    return kib * 1024 / MIB


def pss_mib(pid: int) -> float:
    return smaps_mib(pid, "Pss")


def private_mib(pid: int) -> float:
    """Pages only this process maps (its USS)."""
    return smaps_mib(pid, "Private_Clean", "Private_Dirty")


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (the writer process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


class Sampler:
    """The recorder's memory every 10 ms, on a thread of its own."""

    def __init__(self, base_mib: float):
        self.base = base_mib
        self.peak = 0.0  # both processes' PSS above the base
        self.writer_private = 0.0  # the writer process's own pages, at most
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.01):
            writers = children(me)
            added = pss_mib(me) - self.base + sum(pss_mib(pid) for pid in writers)
            self.peak = max(self.peak, added)
            private = sum(private_mib(pid) for pid in writers)
            self.writer_private = max(self.writer_private, private)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    # The queue is kept full on purpose: the writer's "Training waited ..."
    # warning on stderr is expected.
    batch = rlvr_batch(128, 4, 2048)
    step_mib = (
        sum(v.numel() * v.element_size() for t in batch for v in t.values()) / MIB
    )
    with tempfile.TemporaryDirectory() as root:
        base = pss_mib(os.getpid())
        with Sampler(base) as sampler:
            writer = new_writer(os.path.join(root, "rec"), args.steps, clone=True)
            for step in range(args.steps):
                writer.submit_batch(step, batch)
            writer.flush()
            writer.close()
    print(
        f"# a step of {step_mib:.1f} MiB, {args.steps} steps; the training process "
        f"was at {base:.0f} MiB (PSS) before the writer started; the writer "
        f"process's own pages peaked at {sampler.writer_private:.0f} MiB"
    )
    emit(figure("recorder_rss_mib", sampler.peak, "<=", 512))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
