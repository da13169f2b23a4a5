# SPDX-License-Identifier: Apache-2.0
"""The writer process's side: its loop, serving one request at a time until its
parent ends, the payload found in shared or read memory and stored.

Run as ``__main__`` (``client.CHILD_MODULE``), never imported by the training
process.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import socket
import sys
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import torch

from areal_debug.recording.packed_payload import PackPlan
from areal_debug.recording.writer.payload_file import save_payload
from areal_debug.recording.writer.payload_rules import describe_packed
from areal_debug.recording.writer.process.arena import ALIGN, in_arena, lay_out
from areal_debug.recording.writer.process.memory import MemoryNotReadable, read_memory
from areal_debug.recording.writer.process.messages import (
    Reply,
    ReplyStatus,
    Stop,
    StorePacked,
    StorePlan,
    StoreRequest,
)

# The writer process's niceness (19: the lowest priority).
WRITER_NICE = 19


class ParentGone(RuntimeError):
    """The training process ended; what is being stored is abandoned."""


def _serve(fd: int) -> int:
    parent = os.getppid()

    def check() -> None:
        if os.getppid() != parent:
            raise ParentGone("the training process has ended")

    # The sha256 over the file (in the metadata) already covers every byte; the
    # zip's own CRC32 would cost a pass over the payload. A process-wide switch,
    # so only flipped here, in a process of its own.
    torch.serialization.set_crc32_options(False)
    sock = socket.socket(fileno=fd)
    conn = Connection(os.dup(fd))
    memory = _Memory(sock, parent)
    describer = ThreadPoolExecutor(1, thread_name_prefix="describe")
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return 0  # the training process has ended
        if isinstance(request, Stop):
            return 0
        try:
            # The payload's tensors live only in this call: the memory they
            # view can be remapped for the next one.
            payload = memory.payload(request)
            reply = Reply(ReplyStatus.OK, *_store(request, payload, check, describer))
        except MemoryNotReadable as e:
            reply = Reply(ReplyStatus.UNREADABLE, message=str(e))
        except ParentGone:
            return 0
        except BaseException as e:  # noqa: BLE001 - every error goes back
            reply = Reply.failed(e)
        try:
            conn.send_bytes(pickle.dumps(reply))
        except OSError:
            return 0


class _Memory:
    """Where the writer process finds a payload's buffers: the arena it shares
    with the training process, or its own scratch memory, read into from the
    training process's (both kept and regrown across payloads: fresh memory
    costs a page fault per 4 KiB)."""

    def __init__(self, sock: socket.socket, parent: int):
        self.sock = sock
        self.parent = parent
        self.arena: mmap.mmap | None = None
        self.scratch: mmap.mmap | None = None

    def payload(self, request: StoreRequest) -> dict[str, Any]:
        """The request's packed payload, over this memory."""
        match request:
            case StorePlan():
                return self._read(request.plan, request.spans)
            case StorePacked():
                return self._from_arena(request)
        raise TypeError(f"not a request the writer process serves: {request!r}")

    def _from_arena(self, request: StorePacked) -> dict[str, Any]:
        if request.arena:
            _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
            if self.arena is not None:
                self.arena.close()
            self.arena = mmap.mmap(fds[0], request.arena)
            os.close(fds[0])
        packed = dict(request.packed)
        for k, spec in request.tensors.items():
            packed[k] = in_arena(self.arena, *spec)
        packed["buffers"] = [in_arena(self.arena, *spec) for spec in request.buffers]
        return packed

    def _read(self, plan: PackPlan, spans: list[tuple[array, array]]):
        """Each dtype's buffer read out of the training process's memory."""
        layout, offset = lay_out(
            [(dtype, [n]) for dtype, n in zip(plan.dtypes, plan.numels(), strict=True)]
        )
        if self.scratch is None or len(self.scratch) < offset:
            if self.scratch is not None:
                self.scratch.close()
            self.scratch = mmap.mmap(-1, max(offset, ALIGN))
        buffers = [in_arena(self.scratch, *spec) for spec in layout]
        for (addresses, lengths), buffer in zip(spans, buffers, strict=True):
            if buffer.numel():
                pieces = list(zip(addresses, lengths, strict=True))
                read_memory(self.parent, pieces, buffer.data_ptr())
        return plan.packed(buffers)


def _store(
    request: StoreRequest,
    packed: dict[str, Any],
    check: Callable[[], None],
    describer: ThreadPoolExecutor,
):
    described = None
    if request.describe:
        # Beside the save, which spends most of its time with the GIL released.
        described = describer.submit(describe_packed, packed)
    try:
        stored = save_payload(
            request.path,
            packed,
            request.codec,
            request.level,
            check,
            request.threads,
        )
    finally:
        described = described.result() if described is not None else None
    if request.meta is not None:
        check()
        request.meta.write(stored, described)
    return stored, described


def _main(argv: list[str]) -> int:
    fd = int(argv[0])
    # The lowest CPU priority: it takes the cycles training leaves idle, not a
    # core a training thread (or its data loading) is waiting for.
    with contextlib.suppress(OSError):
        os.nice(WRITER_NICE)
    return _serve(fd)


if __name__ == "__main__":
    # Served by the module under its own name, not as __main__: what a harness's
    # CHILD_MODULE patches in ``areal_debug.recording.writer.process`` is what runs.
    from areal_debug.recording.writer.process import server

    sys.exit(server._main(sys.argv[1:]))
