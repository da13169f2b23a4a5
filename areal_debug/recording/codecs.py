# SPDX-License-Identifier: Apache-2.0
"""Payload codecs (v2: the members of ``format.Codec``) and checksums: bytes in,
bytes out."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, BinaryIO

import zstandard

from areal_debug.recording.format import Codec, RecordingError


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_payload(raw: bytes | memoryview, codec: str, level: int) -> bytes:
    """The bytes to store for a ``torch.save`` output ``raw``, in one go."""
    if Codec(codec) is Codec.NONE:
        return raw
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)


class PayloadSink:
    """A file-like target for ``torch.save`` that encodes as it goes.

    ``torch.save`` writes its records straight into the codec and the file, so
    no whole uncompressed copy of the payload is ever built in memory (fresh
    memory costs a page fault per 4 KiB) and the compressor, the hash and the
    file write all run with the GIL released. The frame then does not carry
    its content size: the metadata's ``raw_bytes`` bounds the reader instead.
    """

    def __init__(
        self,
        file: BinaryIO,
        codec: str,
        level: int,
        check: Callable[[], None] | None = None,
        threads: int = 0,
    ):
        self.file = file
        # Called before each write: may raise to abandon the file.
        self.check = check
        self.codec = Codec(codec)
        self.raw_bytes = 0
        self.bytes = 0
        self._sha = hashlib.sha256()
        self._pending = bytearray()
        self._encoder = (
            zstandard.ZstdCompressor(level=level, threads=threads).compressobj()
            if self.codec is Codec.ZSTD
            else None
        )

    # torch.save writes thousands of small records (headers, pickle pieces):
    # gathered up to this size, each costs one encoder call, not one each.
    CHUNK = 8 << 20

    def write(self, data) -> int:
        n = len(data)
        self.raw_bytes += n
        if n >= self.CHUNK:
            self._encode_pending()
            self._encode(data)
        else:
            self._pending += data
            if len(self._pending) >= self.CHUNK:
                self._encode_pending()
        return n

    def flush(self) -> None:
        """torch.save flushes at its end: nothing to do before finish()."""

    def finish(self) -> dict[str, Any]:
        """End the frame; the metadata a reader needs (codec, sizes, sha256)."""
        self._encode_pending()
        if self._encoder is not None:
            self._store(self._encoder.flush())
        return {
            "codec": self.codec.value,
            "bytes": self.bytes,
            "raw_bytes": self.raw_bytes,
            # Over the bytes on disk: a damaged file is caught before decoding it.
            "sha256": self._sha.hexdigest(),
        }

    def _encode_pending(self) -> None:
        if self._pending:
            self._encode(self._pending)
            self._pending = bytearray()

    def _encode(self, data) -> None:
        self._store(self._encoder.compress(data) if self._encoder else data)

    def _store(self, data) -> None:
        if self.check is not None:
            self.check()
        if data:
            self._sha.update(data)
            self.file.write(data)
            self.bytes += len(data)


def decode_payload(data: bytes, codec: str, raw_bytes: int | None, name: str) -> bytes:
    """The ``torch.save`` bytes of a stored payload; never more than ``raw_bytes``."""
    if codec == Codec.NONE:
        return data
    if codec != Codec.ZSTD:
        raise RecordingError(
            f"{name} uses codec {codec!r}, which this areal-debug does not read "
            f"(it reads {Codec.names()}). Install the areal-debug version that wrote "
            "the recording, or a newer one."
        )
    if not isinstance(raw_bytes, int) or raw_bytes < 0:
        raise RecordingError(
            f"The metadata of {name} has no valid raw_bytes ({raw_bytes!r}); it is "
            "needed to decompress safely. Restore the metadata file or re-record."
        )
    declared = None
    try:
        # Checked before any memory is taken: a frame cannot inflate beyond what
        # the metadata promised. Streamed frames (PayloadSink) declare no size (-1);
        # max_output_size then bounds the output.
        declared = zstandard.frame_content_size(data)
        if declared not in (raw_bytes, -1):
            raise RecordingError(
                f"{name} declares {declared} uncompressed bytes, its metadata says "
                f"{raw_bytes}. Restore the file and its metadata, or re-record."
            )
        raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=raw_bytes)
    except zstandard.ZstdError as e:
        if declared == -1 and "did not decompress full frame" in str(e):
            raise RecordingError(
                f"{name} inflates beyond the {raw_bytes} bytes its metadata says; "
                "decompression stopped there. Restore the file and its metadata, "
                "or re-record."
            ) from e
        raise RecordingError(
            f"Cannot decompress {name}: {e!r}. The file is damaged; restore it or "
            "re-record the step."
        ) from e
    except (MemoryError, OverflowError) as e:
        raise RecordingError(
            f"Cannot decompress {name}: its metadata says {raw_bytes} uncompressed "
            "bytes, more than this machine can hold. Restore the metadata file or "
            "re-record the step."
        ) from e
    if len(raw) != raw_bytes:
        raise RecordingError(
            f"{name} decompressed to {len(raw)} bytes, its metadata says "
            f"{raw_bytes}. Restore the file or re-record the step."
        )
    return raw
