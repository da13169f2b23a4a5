# SPDX-License-Identifier: Apache-2.0
"""One dump run per recording: a lock that names its holder and dies with it.

The lock is an ``flock`` on ``<recording>/dump.lock``: the kernel drops it when
the holding process exits or is killed, so a crashed run never leaves it
stuck. The file also says who holds it (pid, host, run, since when), for the
error a second run gets and for readers, which say that the recording is
still being written.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import time
from typing import Any

from areal_debug.logs import get_logger
from areal_debug.recording.format import LOCK_FILE, RecordingError

logger = get_logger("DebugDump")

# A reader checks the lock by taking it shared for an instant: a dump run
# starting meanwhile waits this long before it calls the recording taken.
ACQUIRE_PATIENCE_S = 2.0


class RecordingLock:
    """Held by the coordinator of the dump run writing a recording."""

    def __init__(self, fd: int | None, path: str):
        self._fd = fd
        self.path = path

    @classmethod
    def acquire(cls, recording: str, run: str) -> RecordingLock:
        """Take the recording at ``recording`` for this process (``run`` names it
        for others); ``RecordingError`` naming the holder if another run has it."""
        os.makedirs(recording, exist_ok=True)
        path = os.path.join(recording, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + ACQUIRE_PATIENCE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                os.close(fd)
                raise RecordingError(
                    f"debug.path={recording} is being recorded by another dump run "
                    f"({describe(read_holder(path))}). Two runs writing one "
                    "recording would mix their steps. Wait for that run to end or "
                    "stop it, or set debug.path to another directory. (A run that "
                    "crashed holds nothing: the lock ends with its process.)"
                ) from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    os.close(fd)
                    raise
                logger.warning(
                    f"The filesystem of {recording} has no file locks ({e!r}): "
                    "areal-debug cannot refuse a second dump run writing the same "
                    "recording. Make sure only one run records there."
                )
                break
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "run": run,
            "since": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        # Written in place: the lock is on this file, a rename would drop it.
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        # Nobody holds it: readers see an empty file (if the disk still takes
        # writes; the unlock below is what counts).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_holder(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            holder = json.load(f)
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "a run that has not yet said who it is"
    return (
        f"{holder.get('run', '?')}, pid {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')}, since {holder.get('since', '?')}"
    )


def writer_of(recording: str) -> dict[str, Any] | None:
    """Who is writing ``recording`` now (pid, host, run, since), None if no one."""
    path = os.path.join(recording, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(path)
    except OSError:
        return None  # no locks here: nothing to tell
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
