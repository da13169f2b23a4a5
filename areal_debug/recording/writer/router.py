# SPDX-License-Identifier: Apache-2.0
"""Where the writer thread has a payload stored: by the writer process (which reads
it out of this process's memory, or gets it through shared memory), or, without
one, on the writer thread itself."""

from __future__ import annotations

from typing import Any

from areal_debug.recording.format import Codec
from areal_debug.recording.packed_payload import is_packed, pack, plan
from areal_debug.recording.writer.jobs import logger
from areal_debug.recording.writer.payload_file import save_payload
from areal_debug.recording.writer.payload_rules import describe_packed
from areal_debug.recording.writer.process import client
from areal_debug.recording.writer.process.client import WriterProcessUnavailable
from areal_debug.recording.writer.process.memory import MemoryNotReadable
from areal_debug.recording.writer.process.messages import MetaFile


def _packed(value: Any) -> dict[str, Any]:
    return value if is_packed(value) else pack(value)


def _no_writer_process(error: BaseException) -> None:
    logger.warning(
        f"areal-debug could not use its writer process ({error!r}); payloads "
        "are stored on the writer thread instead, which may slow a Python-heavy "
        "training loop. Set debug.writer_process=false to silence this."
    )


class PayloadRouter:
    """Stores payloads through ``codec``, in the writer process while it serves.

    The writer process is started here, while training starts (it imports
    torch); one that cannot start or becomes unusable is given up once, and
    the writer thread stores every payload after it.
    """

    def __init__(
        self, recording: str, codec: Codec, level: int, threads: int, use_process: bool
    ):
        self.codec = codec
        self.level = level
        self.threads = threads
        self.process = self._start(recording) if use_process else None

    @staticmethod
    def _start(recording: str) -> client.PayloadProcess | None:
        try:
            process = client.shared()
            process.start(recording)
            return process
        except Exception as e:  # noqa: BLE001 - the thread can store instead
            _no_writer_process(e)
            return None

    @property
    def reads_memory(self) -> bool:
        """Whether the writer process reads payloads out of this process."""
        process = self.process  # the writer thread may drop it meanwhile
        return process is not None and process.reads_memory

    def store(
        self,
        path: str,
        value: Any,
        describe: bool = False,
        meta: MetaFile | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Store ``value`` (a batch, or any container of tensors) or its packed
        form; with ``describe`` also its shard description; with ``meta``
        write that file after it.

        The writer process reads the tensors out of this process where it may,
        else gets them packed through shared memory; without a writer process
        the writer thread stores them itself.
        """
        if self.process is not None:
            try:
                return self._in_process(self.process, path, value, describe, meta)
            except WriterProcessUnavailable as e:
                _no_writer_process(e)
                self.process = None
        packed = _packed(value)
        stored = save_payload(path, packed, self.codec, self.level, None, self.threads)
        described = describe_packed(packed) if describe else None
        if meta is not None:
            meta.write(stored, described)
        return stored, described

    def _in_process(
        self,
        process: client.PayloadProcess,
        path: str,
        value: Any,
        describe: bool,
        meta: MetaFile | None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        how = (self.codec, self.level, describe, self.threads, meta)
        if process.reads_memory and not is_packed(value):
            try:
                return process.store_plan(path, plan(value), *how)
            except MemoryNotReadable as e:
                logger.info(
                    f"areal-debug's writer process may not read this "
                    f"process's memory ({e}); payloads are copied into "
                    "shared memory for it instead."
                )
        return process.store(path, _packed(value), *how)
