# SPDX-License-Identifier: Apache-2.0
"""A head's stop marker (``stopped-shard-N.json``): why and where its writer stopped,
written into space reserved at start when the disk has none left."""

from __future__ import annotations

import contextlib
import datetime
import json
import os

from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.format import (
    STOPPED_WRITING,
    RecordingError,
    reserved_marker_name,
    stop_consequence,
    stopped_marker_name,
)
from areal_debug.recording.reader import reserved_marker
from areal_debug.recording.writer.jobs import logger

RESERVED_BYTES = 4096


def _reserve_space(path: str, marker: str) -> None:
    """Allocate room for a stop marker now, for when the disk is full later. A
    marker an earlier run left in the reservation (its directory had turned
    read-only) is first given its own name, so it is not overwritten."""
    # Best effort, like the reservation itself: a writer that cannot write is
    # stopped by its first write, never by its start.
    with contextlib.suppress(OSError, RecordingError):
        if reserved_marker(path) is not None:
            os.replace(path, marker)
    with contextlib.suppress(OSError):
        with open(path, "wb") as f:
            f.write(b" " * RESERVED_BYTES)
            f.flush()
            os.fsync(f.fileno())


def _write_into_reserve(reserve: str, marker: str, obj: dict) -> bool:
    """Write ``obj`` as JSON over the reserved blocks, then rename it to ``marker``.
    In a directory that no longer takes new names (read-only) the marker stays
    under the reservation's name, where readers look too."""
    obj = {**obj, "error": obj["error"][: RESERVED_BYTES // 2]}
    data = json.dumps(obj, sort_keys=True).encode()
    if len(data) > RESERVED_BYTES or not os.path.exists(reserve):
        return False
    try:
        with open(reserve, "r+b") as f:
            f.write(data)
            f.truncate(len(data))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.replace(reserve, marker)
    return True


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


class StopMarker:
    """One head's stop marker: its space reserved at start, written (and the
    stop logged, once) when a write fails."""

    def __init__(self, path: str, shard: int, fatal_errors: bool):
        self.shard = shard
        self.fatal_errors = fatal_errors
        self.marker = os.path.join(path, stopped_marker_name(shard))
        self.reserve = os.path.join(path, reserved_marker_name(shard))
        _reserve_space(self.reserve, self.marker)

    def write(
        self, step: int, error: BaseException, writing: str, complete: bool
    ) -> None:
        """Record why and where this head stopped recording, and what it was
        writing (a job's kind: a step's later files fail after its batch is
        whole, then the step is ``complete``); log it."""
        why = {
            "shard": self.shard,
            "step": step,
            "writing": writing,
            "error": repr(error),
            "time": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        then = (
            "Training stops (debug.fail_on_write_error=true)."
            if self.fatal_errors
            else "Training goes on without recording "
            "(set debug.fail_on_write_error=true to stop it instead)."
        )
        logger.error(
            f"areal-debug stopped recording at step {step} (shard {self.shard}) "
            f"writing {STOPPED_WRITING.get(writing, writing)}: {error!r}. "
            f"{_sentence(stop_consequence(why, complete))} {then} "
            "Fix the cause (disk space, permissions) and start a new recording "
            "to record again."
        )
        try:
            atomic_write_json(self.marker, why)
        except OSError as e:
            # A full disk or a read-only directory: the file reserved at start
            # still takes the marker.
            if not _write_into_reserve(self.reserve, self.marker, why):
                logger.error(f"Could not write {self.marker} either: {e!r}")

    def release(self) -> None:
        """Give the reserved space back (the writer is closed)."""
        with contextlib.suppress(OSError):
            os.unlink(self.reserve)
