# SPDX-License-Identifier: Apache-2.0
"""A payload's file: ``torch.save`` through a codec, written atomically, and the
metadata a reader needs. The one way every payload is stored: by the writer
process, the writer thread, and tools and tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from areal_debug.recording.atomic import atomic_file
from areal_debug.recording.codecs import PayloadSink
from areal_debug.recording.format import Codec


def save_payload(
    path: str,
    obj: Any,
    codec: str = Codec.NONE,
    level: int = 1,
    check: Callable[[], None] | None = None,
    threads: int = 0,
) -> dict[str, Any]:
    """torch.save ``obj`` through ``codec`` into ``path`` atomically; return the
    metadata a reader needs (file, codec, sizes, sha256). ``check`` runs between
    chunks and before the rename, and may raise to abandon the file;
    ``threads``: zstd's own worker threads."""
    with atomic_file(path) as f:
        sink = PayloadSink(f, codec, level, check, threads)
        torch.save(obj, sink)
        stored = sink.finish()
        if check is not None:
            check()
    return {"file": os.path.basename(path), **stored}
