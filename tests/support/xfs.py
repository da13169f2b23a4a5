# SPDX-License-Identifier: Apache-2.0
"""A loop-mounted XFS (reflinks on) for the reflink test and benchmark.

Test and benchmark tooling, not shipped in the wheel: it needs root and
``mkfs.xfs``, which ``make test`` never installs (``.ci/run`` does).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path


class ReflinkFilesystemUnavailable(RuntimeError):
    """No filesystem with reflinks can be made here (not root, no mkfs.xfs, no
    loop device); the reason says which."""


@contextlib.contextmanager
def xfs_mount(workdir: str | Path, size_mib: int = 400):
    """A small XFS filesystem (reflinks on) loop-mounted under ``workdir`` for
    the duration of the block: where kept recover checkpoints can be reflinks.
    Needs root and ``mkfs.xfs`` (Debian's ``xfsprogs``)."""
    if os.geteuid() != 0:
        raise ReflinkFilesystemUnavailable("mounting a filesystem needs root")
    if shutil.which("mkfs.xfs") is None:
        raise ReflinkFilesystemUnavailable("mkfs.xfs is not installed (xfsprogs)")
    workdir = Path(workdir)
    image, mountpoint = workdir / "xfs.img", workdir / "xfs"
    mountpoint.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    steps = (["mkfs.xfs", "-q", "-m", "reflink=1", str(image)],)
    steps += (["mount", "-o", "loop", str(image), str(mountpoint)],)
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            image.unlink()
            raise ReflinkFilesystemUnavailable(
                f"{' '.join(argv[:2])} failed: {done.stderr.strip()}"
            )
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True)
        image.unlink()


def used_bytes(path: str | Path) -> int:
    """Bytes in use on the filesystem holding ``path``."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize
