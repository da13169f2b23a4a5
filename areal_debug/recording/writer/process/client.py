# SPDX-License-Identifier: Apache-2.0
"""The training process's side of the writer process: starting it (``BOOT``),
handing it payloads (``PayloadProcess``), one per training process (``shared``)."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pickle
import socket
import subprocess
import sys
import threading
from array import array
from multiprocessing.connection import Connection
from typing import Any

import torch

from areal_debug.recording.format import Codec, RecordingError
from areal_debug.recording.packed_payload import PackPlan
from areal_debug.recording.writer.process.arena import ALIGN, Arena, lay_out
from areal_debug.recording.writer.process.memory import MemoryNotReadable, PtraceGrant
from areal_debug.recording.writer.process.messages import (
    MetaFile,
    Placed,
    Reply,
    ReplyStatus,
    Stop,
    StorePacked,
    StorePlan,
    StoreRequest,
)

# The module the writer process runs (as ``__main__``): ``server``. It reads
# nothing from its command line but the socket's descriptor. A harness that needs
# code of its own in the writer process (the reliability suite's kill points)
# points this at a module that installs it and then calls ``server._main``.
CHILD_MODULE = "areal_debug.recording.writer.process.server"

# What the writer process runs first (``python -c BOOT HERE MODULE ARGS...``): it
# makes HERE, the directory this package was imported from (a script may have put
# it on sys.path by hand), importable without setting PYTHONPATH, which would put
# it ahead of the standard library (an installed package's HERE is site-packages).
# HERE goes just before the first site-packages directory, unless it is on
# sys.path already; then MODULE runs as __main__ with ARGS as its arguments.
BOOT = """\
# areal-debug writer process (what ps shows first)
import os, runpy, site, sys
here, module = sys.argv[1:3]
path = [os.path.abspath(p) for p in sys.path]
sites = [*site.getsitepackages(), site.getusersitepackages()]
sites = {os.path.abspath(p) for p in sites}
if here not in path:
    first = next((i for i, p in enumerate(path) if p in sites), len(path))
    sys.path.insert(first, here)
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` if its memory holds its values in order, else such a copy. Tensor
    getters only, no tensor operation (each would give up the GIL), except for
    the rare tensor that needs the copy."""
    if t.is_contiguous() and (t._base is None or not (t.is_conj() or t.is_neg())):
        return t
    return t.resolve_conj().resolve_neg().contiguous()


class WriterProcessUnavailable(RecordingError):
    """The writer process cannot be used here: it ended before it stored
    anything, or no shared memory could be had for a payload (the writer thread
    stores payloads instead)."""


class PayloadProcess:
    """The training process's side: start the writer process, hand it payloads.

    A payload goes across one of two ways. ``store_plan``: only where each
    tensor lies (``packed_payload.PackPlan``); the writer process reads the
    tensors out of this process's memory itself (``process_vm_readv``), so this
    process copies nothing and its writer thread takes the GIL back a handful
    of times per payload. ``store``: a packed payload copied into shared
    memory, where reading another process's memory is not allowed.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._conn: Connection | None = None
        self._arena: Arena | None = None
        # Payloads the current process stored: one that dies before any could
        # not start (unavailable), one that dies later was killed.
        self._served = 0
        self._label = ""
        # Until the writer process says it may not read this process's memory.
        self.reads_memory = True
        self._ptrace = PtraceGrant()

    @property
    def ptrace_grantee(self) -> int | None:
        """The writer process this process has let read its memory (Yama's
        ``PR_SET_PTRACER``), or None: none was needed, or it has ended."""
        return self._ptrace.pid

    def start(self, recording: str = "") -> None:
        """Start the writer process (it imports torch while training starts).
        ``recording`` only names it in the process table."""
        with self._lock:
            self._label = recording
            self._start()

    def _start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._close()
        self._served = 0
        ours, theirs = socket.socketpair()
        argv = [sys.executable, "-c", BOOT, _package_root(), CHILD_MODULE]
        argv.append(str(theirs.fileno()))
        if self._label:
            argv.append(f"--recording={self._label}")  # what ps shows it is for
        try:
            self._proc = subprocess.Popen(
                argv,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                # Its own threads would compete with training for the cores.
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
        finally:
            theirs.close()
        self._sock = ours
        self._conn = Connection(os.dup(ours.fileno()))
        self._ptrace.give(self._proc.pid)

    def store_plan(
        self,
        path: str,
        plan: PackPlan,
        codec: str,
        level: int,
        describe: bool,
        threads: int = 0,
        meta: MetaFile | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Store the payload ``plan`` lays out (and its ``meta`` file), read by
        the writer process from this process's memory; ``MemoryNotReadable`` if
        it may not."""
        # The tensors stay referenced (and so in place) until the reply.
        dense = [[_dense(t) for t in group] for group in plan.groups]
        request = StorePlan(
            path,
            Codec(codec).value,
            level,
            threads,
            describe,
            meta,
            plan=dataclasses.replace(plan, groups=None),
            spans=[
                (
                    array("q", [t.data_ptr() for t in g]),
                    array("q", [t.nbytes for t in g]),
                )
                for g in dense
            ],
        )
        with self._lock:
            self._start()
            reply = self._request(request)
        if reply.status is ReplyStatus.UNREADABLE:
            self.reads_memory = False
            raise MemoryNotReadable(reply.message)
        return reply.result()

    def store(
        self,
        path: str,
        packed: dict[str, Any],
        codec: str,
        level: int,
        describe: bool,
        threads: int = 0,
        meta: MetaFile | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """``store_packed`` (and its ``meta`` file) in the writer process,
        through shared memory; its errors raised here."""
        tensors = {k: v for k, v in packed.items() if isinstance(v, torch.Tensor)}
        with self._lock:
            self._start()
            layout, new_arena = self._copy_in([*tensors.values(), *packed["buffers"]])
            # Tensors travel in the arena; their keys keep their place, so both
            # processes save the same bytes.
            plain = {
                k: None if k == "buffers" or k in tensors else v
                for k, v in packed.items()
            }
            request = StorePacked(
                path,
                Codec(codec).value,
                level,
                threads,
                describe,
                meta,
                packed=plain,
                tensors=dict(zip(tensors, layout, strict=False)),
                buffers=layout[len(tensors) :],
                arena=self._arena.size if new_arena else None,
            )
            reply = self._request(request, self._arena.fd if new_arena else None)
        return reply.result()

    def _copy_in(self, tensors: list[torch.Tensor]) -> tuple[list[Placed], bool]:
        """Copy ``tensors`` into the arena (grown to fit); their (dtype, offset,
        shape) there, and whether the arena is new (its fd must go across)."""
        layout, offset = lay_out(
            [(str(t.dtype).removeprefix("torch."), list(t.shape)) for t in tensors]
        )
        new_arena = self._arena is None or self._arena.size < offset
        if new_arena:
            if self._arena is not None:
                self._arena.close()
                self._arena = None
            try:
                self._arena = Arena(max(offset, ALIGN))
            except OSError as e:
                raise WriterProcessUnavailable(
                    f"could not take {offset / 2**20:.0f} MiB of shared memory "
                    f"for a payload: {e!r}"
                ) from e
        for t, (_, at, _) in zip(tensors, layout, strict=True):
            n = t.numel() * t.element_size()
            self._arena.bytes[at : at + n].view(t.dtype).copy_(t.reshape(-1))
        return layout, new_arena

    def _request(self, request: StoreRequest, fd: int | None = None) -> Reply:
        """Send ``request`` (and ``fd``), wait for the reply with the GIL released."""
        try:
            # Plain pickle: the request holds no tensor.
            self._conn.send_bytes(pickle.dumps(request))
            if fd is not None:
                socket.send_fds(self._sock, [b"F"], [fd])
            reply = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as e:
            raise self._died(request.path) from e
        self._served += 1
        return reply

    def _died(self, path: str) -> RecordingError:
        code = self._proc.wait() if self._proc is not None else None
        served = self._served
        self._close()
        if not served:
            return WriterProcessUnavailable(
                f"the writer process exited (code {code}) before storing anything"
            )
        return RecordingError(
            f"The recording's writer process exited (code {code}) while storing "
            f"{path}. It was killed or ran out of memory; its last payload is not "
            "recorded."
        )

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send_bytes(pickle.dumps(Stop()))
            self._conn.close()
            self._sock.close()
            self._conn = self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        # Ended (or died) and reaped: its permission to read this process's
        # memory goes with it.
        self._ptrace.revoke()
        if self._arena is not None:
            self._arena.close()
            self._arena = None


def _package_root() -> str:
    """The directory this package was imported from (the writer process's
    ``BOOT`` makes it importable there)."""
    import areal_debug

    return os.path.dirname(os.path.dirname(os.path.abspath(areal_debug.__file__)))


_shared: PayloadProcess | None = None
_shared_lock = threading.Lock()


def shared() -> PayloadProcess:
    """This training process's writer process (started on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = PayloadProcess()
        return _shared


@atexit.register
def _close_shared() -> None:
    # Registered before the writers' own exit hook, so it runs after it: the
    # writers store what they still hold first.
    if _shared is not None:
        _shared.close()
