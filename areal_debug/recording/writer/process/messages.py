# SPDX-License-Identifier: Apache-2.0
"""What the training process and its writer process (``client`` and ``server``)
say to each other: typed requests and replies.

They are pickled over the socket pair between the training process and the
writer process it started (one program, both sides trusted, as before: the
requests carried a ``PackPlan`` dataclass already). A request never holds a
tensor: tensors travel through shared memory, or are read by the writer process
out of the training process's memory.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.format import RecordingError
from areal_debug.recording.packed_payload import PackPlan
from areal_debug.recording.schema import ShardMeta, StepMeta

# A tensor's place in shared memory: (dtype name, offset, shape).
Placed = tuple[str, int, list[int]]


@dataclass(frozen=True, slots=True)
class StepFile:
    """A step's ``step.json`` (its completion marker), written right after the
    shard's metadata where that one shard makes the step whole: one head, no
    teacher log-probs still to come, no copy still to confirm."""

    path: str
    global_step: int
    steps_per_epoch: int


@dataclass(frozen=True, slots=True)
class MetaFile:
    """A shard's metadata file (``shard-NNNNN.json`` of head ``shard``), written
    (atomically, as JSON) once its payload is stored and described, and the
    step's ``step.json`` after it when ``step`` is given.

    Written where the payload is stored: by the writer process, the writer
    thread is spared the system calls they take (about nine a file), each of
    them a GIL hand-over with a busy training thread. Only the shard's index
    travels in the request; the files' content is ``ShardMeta.to_json`` and
    ``StepMeta.to_json``, as everywhere.
    """

    path: str
    shard: int
    step: StepFile | None = None

    def write(self, stored: dict[str, Any], described: dict[str, Any] | None) -> None:
        """Write the shard's metadata (and the step's, if whole)."""
        if described is None:
            raise ValueError(
                f"{self.path} needs the shard's description: store its payload "
                "with describe=True when a metadata file is to be written."
            )
        shard = ShardMeta.written(self.shard, stored, described)
        atomic_write_json(self.path, shard.to_json())
        if self.step is not None:
            step = StepMeta.of_shards(
                self.step.global_step, self.step.steps_per_epoch, [shard]
            )
            atomic_write_json(self.step.path, step.to_json())


@dataclass(frozen=True, slots=True)
class StoreRequest:
    """Store a payload at ``path`` through ``codec`` (``threads``: zstd's worker
    threads); with ``describe`` describe it for the shard metadata too, with
    ``meta`` write that file after it."""

    path: str
    codec: str
    level: int
    threads: int
    describe: bool
    meta: MetaFile | None


@dataclass(frozen=True, slots=True)
class StorePlan(StoreRequest):
    """The payload ``plan`` lays out (its tensors dropped), read by the writer
    process out of the training process's memory: each dtype's pieces as two
    int64 arrays, their addresses and their lengths in bytes."""

    plan: PackPlan
    spans: list[tuple[array, array]]


@dataclass(frozen=True, slots=True)
class StorePacked(StoreRequest):
    """A packed payload whose tensors lie in the shared arena: ``packed`` with
    them left out (None), and where each is. ``arena``: the size of a new arena,
    whose descriptor follows the request."""

    packed: dict[str, Any]
    tensors: dict[str, Placed]
    buffers: list[Placed]
    arena: int | None


@dataclass(frozen=True, slots=True)
class Stop:
    """No more requests: the writer process ends."""


class ReplyStatus(StrEnum):
    OK = "ok"
    # The writer process may not read the training process's memory here.
    UNREADABLE = "unreadable"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class PortableError:
    """An error of the writer process, as it crosses to the training process:
    OSErrors keep their errno (a full disk is still ``OSError(ENOSPC)``)."""

    type: str
    message: str
    errno: int | None = None
    strerror: str | None = None
    filename: Any = None

    @classmethod
    def of(cls, e: BaseException) -> PortableError:
        if isinstance(e, OSError) and e.errno is not None:
            return cls("OSError", str(e), e.errno, e.strerror, e.filename)
        return cls(type(e).__name__, str(e))

    def rebuilt(self) -> BaseException:
        """The error as the training process raises it."""
        if self.errno is not None:
            args = (self.errno, self.strerror)
            return OSError(*args, self.filename) if self.filename else OSError(*args)
        return RecordingError(f"{self.type}: {self.message} (in the writer process)")


@dataclass(frozen=True, slots=True)
class Reply:
    """The writer process's answer to one request."""

    status: ReplyStatus
    # OK: the stored file's metadata, and the payload's description if asked.
    stored: dict[str, Any] | None = None
    described: dict[str, Any] | None = None
    # UNREADABLE: why.
    message: str = ""
    # ERROR: what failed.
    error: PortableError | None = None

    @classmethod
    def failed(cls, e: BaseException) -> Reply:
        return cls(ReplyStatus.ERROR, error=PortableError.of(e))

    def result(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(stored, described), or the writer process's error raised."""
        if self.status is ReplyStatus.OK:
            return self.stored, self.described
        if self.error is not None:
            raise self.error.rebuilt()
        raise RecordingError(f"{self.status}: {self.message} (in the writer process)")
