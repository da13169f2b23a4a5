# SPDX-License-Identifier: Apache-2.0
"""Reading the training process's memory from its writer process
(``process_vm_readv``), and Yama's permission for it (``PR_SET_PTRACER``): the
Linux glue of the writer process."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import threading

from areal_debug.recording.format import RecordingError


class MemoryNotReadable(RecordingError):
    """The writer process may not read the training process's memory here (a
    ptrace policy, a sandbox): payloads go through shared memory instead."""


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


class PtraceGrant:
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
            return self._pid if self._pid == PtraceGrant._holder else None

    def give(self, pid: int) -> None:
        if not _yama_restricts_ptrace():
            return
        with self._lock:
            if _set_ptracer(pid):
                self._pid = PtraceGrant._holder = pid

    def revoke(self) -> None:
        with self._lock:
            pid, self._pid = self._pid, None
            if pid is not None and pid == PtraceGrant._holder:
                _set_ptracer(0)
                PtraceGrant._holder = None


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
