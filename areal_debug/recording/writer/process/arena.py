# SPDX-License-Identifier: Apache-2.0
"""Shared memory between the training process and its writer process: a memfd
arena, and where each tensor lies in it (or in the writer process's own scratch
memory)."""

from __future__ import annotations

import mmap
import os

import torch

from areal_debug.recording.packed_payload import numel
from areal_debug.recording.writer.process.messages import Placed

# Offsets in shared memory are aligned so every dtype can view its buffer.
ALIGN = 64


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def lay_out(pieces: list[tuple[str, list[int]]]) -> tuple[list[Placed], int]:
    """Tensors ((dtype name, shape) each) one after another in memory, each at
    an aligned offset: their (dtype, offset, shape), and the bytes they span."""
    layout, offset = [], 0
    for dtype, shape in pieces:
        layout.append((dtype, offset, shape))
        offset += _aligned(numel(shape) * getattr(torch, dtype).itemsize)
    return layout, offset


class Arena:
    """Shared memory the writer process maps too: a memfd (no name, so nothing
    is left behind by a crash; not bounded by the size of /dev/shm)."""

    def __init__(self, size: int):
        self.size = size
        self.fd = os.memfd_create("areal-debug-payload", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            # Memory taken now fails here (ENOSPC/ENOMEM), not as SIGBUS later.
            os.posix_fallocate(self.fd, 0, size)
            self.map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)

    def close(self) -> None:
        del self.bytes  # the tensor holds the map's buffer
        self.map.close()
        os.close(self.fd)


def in_arena(arena: mmap.mmap, dtype: str, offset: int, shape: list[int]):
    """A tensor over its bytes in the arena, not a copy (and not a view of the
    whole arena, which torch.save would store whole)."""
    n = numel(shape)
    kind = getattr(torch, dtype)
    if not n:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(arena, dtype=kind, count=n, offset=offset).view(shape)
