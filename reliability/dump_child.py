# SPDX-License-Identifier: Apache-2.0
"""A dump run at the recording level, to be killed: the real lock, manifest,
writers (two heads), retention and kept recover checkpoints of areal-debug,
driven by a loop that stands in for training.

    python -m reliability.dump_child PATH --steps 8 [--kill POINT:N] [--keep-last K]

With ``--kill POINT:N`` the process SIGKILLs itself the N-th time it reaches
POINT (see ``POINTS``). Like a resumed AReaL run it starts after the latest
kept recover checkpoint, sweeps what a killed run left and moves the steps it
records again aside. Prints ``writing`` once it starts recording.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import sys
import time
from types import SimpleNamespace

from areal_debug.recording import checkpoints
from areal_debug.recording.codecs import PayloadSink
from areal_debug.recording.format import kept_steps
from areal_debug.recording.lock import RecordingLock
from areal_debug.recording.retention import RetentionPolicy
from areal_debug.recording.writer.process import client
from areal_debug.recording.writer.start import (
    supersede_steps,
    sweep_leftovers,
    write_manifest,
)
from reliability import recording

# Where a kill can land: the function it interrupts, and which calls count.
# The kill point the writer process installs too: [point, n], as JSON.
WRITER_KILL_ENV = "RELIABILITY_WRITER_KILL_AT"

POINTS = {
    "lock-taken": ("lock", None),
    "payload-write": ("store", None),
    "payload-commit": ("replace", r"shard-\d+\.pt(\.zst)?$"),
    "shard-metadata-commit": ("replace", r"shard-\d+\.json$"),
    "teacher-commit": ("replace", r"teacher_logp"),
    "step-commit": ("replace", r"/step\.json$"),
    "after-step-commit": ("replaced", r"/step\.json$"),
    "stats-commit": ("replace", r"/stats\.json$"),
    "checkpoint-copy": ("copy", None),
    "checkpoint-commit": ("replace", r"/recover/step-\d+$"),
    "retention-rename": ("replace", r"\.deleting-step"),
    "retention-delete": ("rmtree", r"\.deleting-step"),
}


class KillAt:
    """SIGKILL this process the ``n``-th time ``point`` is reached. Installed in
    the writer process too, where payloads are stored: there it kills the
    training process first, so the whole run dies at that point."""

    def __init__(self, point: str, n: int, in_writer_process: bool = False):
        self.kind, pattern = POINTS[point]
        self.pattern = re.compile(pattern) if pattern else None
        self.left = n
        self.victims = [os.getppid(), os.getpid()] if in_writer_process else []
        if not in_writer_process:
            # The writer process runs reliability.writer_child, which installs
            # the same kill point there (read from the environment it inherits).
            os.environ[WRITER_KILL_ENV] = json.dumps([point, n])
            client.CHILD_MODULE = "reliability.writer_child"

    def reached(self, kind: str, path: str = "") -> None:
        if kind != self.kind or (self.pattern and not self.pattern.search(path)):
            return
        self.left -= 1
        if self.left == 0:
            for pid in self.victims:
                os.kill(pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self) -> None:
        real_replace, real_store = os.replace, PayloadSink._store
        real_copy, real_rmtree = shutil.copy2, shutil.rmtree

        def replace(src, dst, *a, **k):
            self.reached("replace", os.fspath(dst))
            real_replace(src, dst, *a, **k)
            self.reached("replaced", os.fspath(dst))

        def store(sink, data):
            real_store(sink, data[: len(data) // 2])  # half of it on disk
            self.reached("store")
            real_store(sink, data[len(data) // 2 :])

        def copy(src, dst, *a, **k):
            self.reached("copy")
            return real_copy(src, dst, *a, **k)

        def rmtree(path, *a, **k):
            self.reached("rmtree", os.fspath(path))
            return real_rmtree(path, *a, **k)

        os.replace, PayloadSink._store = replace, store
        shutil.copy2, shutil.rmtree = copy, rmtree


def kill_in_writer_process() -> None:
    """In the writer process (reliability.writer_child): the parent's kill point."""
    point, n = json.loads(os.environ[WRITER_KILL_ENV])
    KillAt(point, n, in_writer_process=True).install()


def config(root: str) -> SimpleNamespace:
    """What areal_compat.recover_paths reads of an AReaL config."""
    return SimpleNamespace(
        experiment_name="reliability",
        trial_name="t0",
        cluster=SimpleNamespace(fileroot=root),
    )


def recover_dirs(path: str) -> tuple[str, dict[str, str]]:
    """(recover info dir, {"default": checkpoint dir}) of the child recording at
    ``path``, where AReaL's layout puts them (computed by the parent, which has
    AReaL loaded: the child, like the writer process, never imports it)."""
    from areal_debug.areal_compat import recover_paths

    return recover_paths(config(path + ".root"), "t0", ["default"])


def command(path: str, *extra: str) -> list[str]:
    """The child's command line, its recover dirs worked out here."""
    dirs = json.dumps(recover_dirs(path))
    return [sys.executable, "-m", __spec__.name, path, "--recover-dirs", dirs, *extra]


def save_recover_checkpoint(info: str, ckpts: dict[str, str], step: int) -> None:
    """What AReaL's Saver leaves for ``step``: files rewritten in place."""
    for d in (info, ckpts["default"]):
        os.makedirs(d, exist_ok=True)
        for i in range(3):
            with open(os.path.join(d, f"part-{i}.bin"), "wb") as f:
                f.write(bytes([step % 256]) * 256)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--kill", default=None, help="POINT:N")
    ap.add_argument("--keep-last", type=int, default=None)
    ap.add_argument("--checkpoint-every", type=int, default=3)
    ap.add_argument("--pace", type=float, default=0.02, help="seconds of 'training'")
    ap.add_argument("--file-size-limit", type=int, default=None, help="RLIMIT_FSIZE")
    ap.add_argument(
        "--recover-dirs",
        default=None,
        help="JSON [info dir, {model: checkpoint dir}] (default: recover_dirs(PATH))",
    )
    args = ap.parse_args(argv)
    info, ckpts = (
        json.loads(args.recover_dirs) if args.recover_dirs else recover_dirs(args.path)
    )
    if args.file_size_limit:
        # Writes past the limit fail (EFBIG) instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = args.file_size_limit
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    kill = None
    if args.kill:
        point, n = args.kill.rsplit(":", 1)
        kill = KillAt(point, int(n))
        kill.install()
    lock = RecordingLock.acquire(args.path, "reliability/t0")
    if kill:
        kill.reached("lock")
    write_manifest(args.path, recording.MANIFEST)
    kept = kept_steps(args.path)
    start = max(kept) + 1 if kept else 0
    sweep_leftovers(args.path, start)
    supersede_steps(args.path, start)
    heads = recording.writers(
        args.path, retention_policy=RetentionPolicy(keep_last_steps=args.keep_last)
    )
    print("writing", flush=True)
    for step in range(start, args.steps):
        time.sleep(args.pace)
        recording.submit_step(heads, step)
        if step % args.checkpoint_every == args.checkpoint_every - 1:
            save_recover_checkpoint(info, ckpts, step)
            for w in heads:  # as DumpMode.save_recover_checkpoint does
                w.flush()
            try:
                checkpoints.keep_dirs(args.path, step, info, ckpts)
            except OSError:
                pass  # DumpMode logs it and training goes on
    print(f"trained {args.steps - start} steps", flush=True)
    for w in heads:
        w.close()
    lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
