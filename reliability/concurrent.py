# SPDX-License-Identifier: Apache-2.0
"""Concurrent access: readers while a dump run writes, a second dump run on
the same path, and retention deleting steps while they are read."""

from __future__ import annotations

import contextlib
import io
import os
import signal

from areal_debug.cli import main as cli
from areal_debug.recording.format import RecordingError
from areal_debug.recording.lock import RecordingLock, writer_of
from areal_debug.recording.reader import RecordingReader
from reliability import recording
from reliability.crash import end, start_child, started_writing
from reliability.tally import Tally

IN_PROGRESS_STEPS = 20


def _started(path: str, *extra: str):
    proc = start_child(path, *extra)
    if not started_writing(proc):
        end(proc)
        raise RuntimeError("the dump child did not start recording")
    return proc


def _observe(path: str, proc) -> str | None:
    """One look at a recording being written, as inspect/verify/a replay take it."""
    reader = RecordingReader(path)
    holder = reader.writer()
    steps = reader.available_steps()
    for step in steps:
        problem = recording.altered(reader, step)
        if problem:
            return problem
    if holder is None and proc.poll() is None and len(steps) < IN_PROGRESS_STEPS:
        return "the recording is being written, but the reader does not say so"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli(["verify", path])
    if rc != 0:
        return f"verify failed on a recording in progress: {out.getvalue()[-300:]}"
    if holder is not None and "still recording" not in out.getvalue():
        return "verify does not say the recording is in progress"
    return None


def readers_while_writing(root: str, n: int) -> Tally:
    tally = Tally(
        "concurrent: read while a dump writes",
        "only complete steps, exact; says 'still recording'",
    )
    path = os.path.join(root, "in-progress")
    proc = _started(path, "--steps", str(IN_PROGRESS_STEPS), "--pace", "0.05")
    try:
        while tally.tried < n and proc.poll() is None:
            try:
                problem = _observe(path, proc)
            except RecordingError as e:
                problem = f"RecordingError on a healthy recording: {e}"
            tally.record(problem)
    finally:
        end(proc)
    return tally


def second_dump_run(root: str, n: int) -> Tally:
    tally = Tally(
        "concurrent: second dump run on a path",
        "refused naming the first; free once the first is killed",
    )
    for i in range(n):
        path = os.path.join(root, f"twice-{i}")
        first = _started(path, "--steps", "200", "--pace", "0.05")
        try:
            try:
                RecordingLock.acquire(path, "second").release()
                tally.fail("a second dump run was allowed on a recording being written")
            except RecordingError as e:
                named = f"pid {first.pid}" in str(e)
                tally.record(
                    None if named else f"the refusal does not name pid {first.pid}: {e}"
                )
            os.killpg(first.pid, signal.SIGKILL)
        finally:
            end(first)
        try:
            RecordingLock.acquire(path, "after a crash").release()
            tally.ok()
        except RecordingError as e:
            tally.fail(f"the lock of a killed run stays held: {e}")
        if writer_of(path) is not None:
            tally.fail("a released lock still names a writer")
    return tally


def retention_while_reading(root: str, n: int) -> Tally:
    tally = Tally(
        "concurrent: retention deletes while a step is read",
        "the step read whole, or one RecordingError saying it was deleted",
    )
    path = os.path.join(root, "ring")
    proc = _started(path, "--steps", "400", "--pace", "0", "--keep-last", "2")
    try:
        while tally.tried < n and proc.poll() is None:
            reader = RecordingReader(path)
            for step in reader.available_steps():
                try:
                    batches = [
                        reader.load_shard(step, s) for s in range(reader.num_shards)
                    ]
                except RecordingError as e:
                    said = str(e)
                    clear = "deleted while it was being read" in said or (
                        "lacks steps" in said
                    )
                    tally.record(None if clear else f"unclear error: {e}")
                    continue
                tally.record(recording.altered(reader, step, batches))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        end(proc)
    return tally


def run(root: str, n: int) -> list[Tally]:
    os.makedirs(root, exist_ok=True)
    return [
        readers_while_writing(root, n),
        second_dump_run(root, max(1, n // 10)),
        retention_while_reading(root, n),
    ]
