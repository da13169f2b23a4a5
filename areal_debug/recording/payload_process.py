# SPDX-License-Identifier: Apache-2.0
"""The writer process: payloads serialised, compressed, hashed, written and fsynced
outside the training process.

On a thread of the training process that work takes the GIL back dozens of times
a step, and each time a Python-heavy training loop waits. Here the recorder's
writer thread only packs a payload (``packed_payload``: one flat buffer per
dtype), copies the buffers once into shared memory (a memfd both processes map)
and waits for the reply with the GIL released. The writer process reads the
buffers in place, stores the payload atomically and describes it for the shard
metadata.

The process runs this module as ``__main__`` (through a few fixed lines of boot
code, ``BOOT``), not multiprocessing's spawn (which would import the user's
training script again), and imports only torch and this package's format module.
It is started once per training process and shared by its writers, one payload
at a time. It ends with its parent: when idle it reads end-of-file on its socket,
when busy it checks its parent between chunks and before the rename, so a killed
training run leaves no step behind it (at most a temporary file, which the next
run sweeps).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import errno
import functools
import mmap
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import torch

from areal_debug.recording.atomic import atomic_file, atomic_write_json
from areal_debug.recording.codecs import PayloadSink
from areal_debug.recording.format import Codec, RecordingError
from areal_debug.recording.packed_payload import PackPlan, numel, unpack
from areal_debug.recording.payload_messages import (
    MetaFile,
    Placed,
    Reply,
    ReplyStatus,
    Stop,
    StorePacked,
    StorePlan,
    StoreRequest,
)
from areal_debug.recording.payload_rules import describe_batch

# Offsets in shared memory are aligned so every dtype can view its buffer.
ALIGN = 64

# The writer process's niceness (19: the lowest priority).
WRITER_NICE = 19

# The module the writer process runs (as ``__main__``): this one. It reads nothing
# from its command line but the socket's descriptor. A harness that needs code of
# its own in the writer process (the reliability suite's kill points) points this
# at a module that installs it and then calls ``_main``.
CHILD_MODULE = "areal_debug.recording.payload_process"

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


def describe_packed(packed: dict[str, Any]) -> dict[str, Any]:
    """The shard description of a packed batch, read off what is stored."""
    return describe_batch(unpack(packed, copy=False))


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _lay_out(pieces: list[tuple[str, list[int]]]) -> tuple[list[Placed], int]:
    """Tensors ((dtype name, shape) each) one after another in memory, each at
    an aligned offset: their (dtype, offset, shape), and the bytes they span."""
    layout, offset = [], 0
    for dtype, shape in pieces:
        layout.append((dtype, offset, shape))
        offset += _aligned(numel(shape) * getattr(torch, dtype).itemsize)
    return layout, offset


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` if its memory holds its values in order, else such a copy. Tensor
    getters only, no tensor operation (each would give up the GIL), except for
    the rare tensor that needs the copy."""
    if t.is_contiguous() and (t._base is None or not (t.is_conj() or t.is_neg())):
        return t
    return t.resolve_conj().resolve_neg().contiguous()


class _Arena:
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


class WriterProcessUnavailable(RecordingError):
    """The writer process cannot be used here: it ended before it stored
    anything, or no shared memory could be had for a payload (the writer thread
    stores payloads instead)."""


class MemoryNotReadable(RecordingError):
    """The writer process may not read the training process's memory here (a
    ptrace policy, a sandbox): payloads go through shared memory instead."""


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
        self._arena: _Arena | None = None
        # Payloads the current process stored: one that dies before any could
        # not start (unavailable), one that dies later was killed.
        self._served = 0
        self._label = ""
        # Until the writer process says it may not read this process's memory.
        self.reads_memory = True
        self._ptrace = _PtraceGrant()

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
            spans=[[(t.data_ptr(), t.nbytes) for t in group] for group in dense],
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
        layout, offset = _lay_out(
            [(str(t.dtype).removeprefix("torch."), list(t.shape)) for t in tensors]
        )
        new_arena = self._arena is None or self._arena.size < offset
        if new_arena:
            if self._arena is not None:
                self._arena.close()
                self._arena = None
            try:
                self._arena = _Arena(max(offset, ALIGN))
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


PR_SET_PTRACER = 0x59616D61
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def _yama_restricts_ptrace() -> bool:
    """Whether Yama lets a process read only its descendants' memory
    (``ptrace_scope`` 1, Ubuntu's default) unless named with PR_SET_PTRACER."""
    try:
        with open(YAMA_SCOPE) as f:
            return f.read().strip() == "1"
    except OSError:
        return False  # no Yama: nothing to grant


def _set_ptracer(pid: int) -> bool:
    """prctl(PR_SET_PTRACER, pid): name the one process that may read this one's
    memory (0: none). Whether the kernel took it."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0) == 0


class _PtraceGrant:
    """Yama's permission for a writer process to read this process's memory.

    The kernel keeps one such process per process (a grant replaces the last), so
    which pid holds it is kept for the whole process: a grant replaced by another
    PayloadProcess's is not this one's any more, and its revocation leaves the
    other's alone. Where no grant is needed or the kernel refuses one, nothing is
    held (the writer process then says it may not read, and payloads go through
    shared memory)."""

    _lock = threading.Lock()
    _holder: int | None = None  # the pid the kernel was last given

    def __init__(self):
        self._pid: int | None = None

    @property
    def pid(self) -> int | None:
        """The pid this grant let read this process's memory, while it still may."""
        with self._lock:
            return self._pid if self._pid == _PtraceGrant._holder else None

    def give(self, pid: int) -> None:
        if not _yama_restricts_ptrace():
            return
        with self._lock:
            if _set_ptracer(pid):
                self._pid = _PtraceGrant._holder = pid

    def revoke(self) -> None:
        with self._lock:
            pid, self._pid = self._pid, None
            if pid is not None and pid == _PtraceGrant._holder:
                _set_ptracer(0)
                _PtraceGrant._holder = None


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


# -- the writer process ---------------------------------------------------------


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
            packed[k] = _in_arena(self.arena, *spec)
        packed["buffers"] = [_in_arena(self.arena, *spec) for spec in request.buffers]
        return packed

    def _read(self, plan: PackPlan, spans: list[list[tuple[int, int]]]):
        """Each dtype's buffer read out of the training process's memory."""
        layout, offset = _lay_out(
            [(dtype, [n]) for dtype, n in zip(plan.dtypes, plan.numels(), strict=True)]
        )
        if self.scratch is None or len(self.scratch) < offset:
            if self.scratch is not None:
                self.scratch.close()
            self.scratch = mmap.mmap(-1, max(offset, ALIGN))
        buffers = [_in_arena(self.scratch, *spec) for spec in layout]
        for pieces, buffer in zip(spans, buffers, strict=True):
            if buffer.numel():
                read_memory(self.parent, pieces, buffer.data_ptr())
        return plan.packed(buffers)


def _in_arena(arena: mmap.mmap, dtype: str, offset: int, shape: list[int]):
    """A tensor over its bytes in the arena, not a copy (and not a view of the
    whole arena, which torch.save would store whole)."""
    n = numel(shape)
    kind = getattr(torch, dtype)
    if not n:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(arena, dtype=kind, count=n, offset=offset).view(shape)


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


# process_vm_readv takes at most IOV_MAX pieces of memory per call.
IOV_MAX = 1024
# Errors that say the memory may not be read here, not that something broke.
_NOT_ALLOWED = (errno.EPERM, errno.EACCES, errno.ENOSYS)


@functools.cache
def _process_vm_readv():
    """libc's process_vm_readv, typed (bound once per process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    f = libc.process_vm_readv
    vec = ctypes.POINTER(_IOVec)
    f.argtypes = [
        ctypes.c_int,
        vec,
        ctypes.c_ulong,
        vec,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    f.restype = ctypes.c_ssize_t
    return f


def read_memory(pid: int, spans: list[tuple[int, int]], into: int) -> None:
    """Copy the pieces ``spans`` ((address, bytes), in order) of process ``pid``'s
    memory one after another to address ``into`` of this process."""
    readv = _process_vm_readv()
    for i in range(0, len(spans), IOV_MAX):
        part = [(a, n) for a, n in spans[i : i + IOV_MAX] if n]
        total = sum(n for _, n in part)
        if not total:
            continue
        remote = (_IOVec * len(part))(*part)
        local = _IOVec(into, total)
        got = readv(pid, ctypes.byref(local), 1, remote, len(part), 0)
        if got < 0:
            code = ctypes.get_errno()
            if code in _NOT_ALLOWED:
                raise MemoryNotReadable(
                    f"process_vm_readv of the training process: {os.strerror(code)}"
                )
            raise OSError(code, f"process_vm_readv: {os.strerror(code)}")
        if got != total:
            raise OSError(errno.EFAULT, f"process_vm_readv read {got} of {total} bytes")
        into += total


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
        atomic_write_json(request.meta.path, request.meta.body(stored, described))
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
    # CHILD_MODULE patches in ``areal_debug.recording.payload_process`` is what runs.
    from areal_debug.recording import payload_process

    sys.exit(payload_process._main(sys.argv[1:]))
