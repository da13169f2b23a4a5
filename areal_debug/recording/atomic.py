# SPDX-License-Identifier: Apache-2.0
"""Atomic, durable file I/O: a file is whole under its name or not there at all."""

from __future__ import annotations

import contextlib
import json
import os
import random
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

from areal_debug.recording.format import TEMPORARY_PREFIX, RecordingError

# Temporary names: a random suffix and O_EXCL (as tempfile, without its
# per-call checks; a name taken, by a forked process's identical sequence too, is
# simply drawn again).
_names = random.Random()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def _create_temporary(directory: str) -> tuple[int, str]:
    """A new file in ``directory`` (made if missing), open for writing: (fd, path)."""
    for _ in range(100):
        tmp = os.path.join(
            directory, f"{TEMPORARY_PREFIX}{_names.getrandbits(48):012x}"
        )
        try:
            return os.open(tmp, _CREATE, 0o600), tmp
        except FileExistsError:
            continue
        except FileNotFoundError:
            # Only the first file of a directory pays for making it.
            os.makedirs(directory, exist_ok=True)
    raise FileExistsError(f"no free temporary name in {directory} after 100 tries")


@contextlib.contextmanager
def _atomic_fd(path: str) -> Iterator[int]:
    """A descriptor to write ``path`` through (see ``atomic_file``), in as few
    system calls as that takes: each gives the GIL up, and the writer thread
    then waits to take it back from a busy training thread."""
    directory = os.path.dirname(path) or "."
    fd, tmp = _create_temporary(directory)
    try:
        try:
            yield fd
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(directory)


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """A file to write ``path`` through: a temporary name in the same directory,
    fsynced and renamed into place when the block ends without an error.

    A reader sees either no file or the whole file, never a half-written one,
    even if the process dies mid-write.
    """
    with _atomic_fd(path) as fd, os.fdopen(fd, "wb", closefd=False) as f:
        yield f
        f.flush()


def atomic_write_bytes(path: str, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_file``), with bare
    system calls: no buffered file object around them."""
    with _atomic_fd(path) as fd:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(fd, view) :]


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_dir(directory: str) -> None:
    # Makes the rename itself durable; not every filesystem allows it.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: str, obj: Any) -> None:
    # Python floats serialise to their shortest exact repr: no precision lost.
    atomic_write_bytes(
        path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
    )


def open_regular(path: str, mode: str = "rb"):
    """``open(path)``, refused unless it is a regular file: a FIFO or device
    put in a recording's place must not block or flood a reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordingError(
                f"{path} is not a regular file (a device, pipe or directory is in "
                "its place); a recording holds only regular files. Restore it."
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def read_json(path: str, what: str) -> Any:
    try:
        with open_regular(path, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise RecordingError(
            f"Cannot read the {what} {path}: {e}. The file is damaged; re-record "
            "the run or restore the file from a copy."
        ) from e
