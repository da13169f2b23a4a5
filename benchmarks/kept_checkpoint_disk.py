# SPDX-License-Identifier: Apache-2.0
"""What does keeping a recover checkpoint with the recording cost on disk?

On a loop-mounted XFS (reflinks on; needs root and mkfs.xfs), keeps a 256 MiB
checkpoint the way a dump run does (``checkpoints._TreeCopy``: a reflink where the
filesystem allows it) and prints the disk space that took over a full copy's:

- ``kept_checkpoint_bytes_vs_full_copy``: blocks the kept tree took, over those a
  plain copy of the same tree took, on the same filesystem. Blocks, not time:
  counted after ``os.sync()`` (delayed allocation has placed every block), so
  neither the page cache nor the disk's speed moves it; measured once.

Where no such filesystem can be made, the figure is a SKIP line that says why
(ext4, for one, has no reflinks: there the kept copy is a full copy).

    .venv/bin/python benchmarks/kept_checkpoint_disk.py [--mib 256]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The XFS mount is test tooling (tests/support/xfs.py), not part of the package.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from figures import emit, exit_status, figure, skipped  # noqa: E402
from support.xfs import (  # noqa: E402
    ReflinkFilesystemUnavailable,
    used_bytes,
    xfs_mount,
)

from areal_debug.recording.checkpoints import _TreeCopy  # noqa: E402


def taken(root: str, src: str, name: str, reflinks: bool) -> tuple[int, str]:
    """Bytes the filesystem lost to keeping ``src`` as ``name``; how it was kept."""
    before = used_bytes(root)
    copy = _TreeCopy()
    copy._reflinks = reflinks
    copy.tree(src, os.path.join(root, name))
    os.sync()
    return used_bytes(root) - before, copy.describe()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=256)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        try:
            with xfs_mount(work, size_mib=3 * args.mib + 400) as root:
                src = os.path.join(root, "ckpt", "default")
                os.makedirs(src)
                with open(os.path.join(src, "model.safetensors"), "wb") as f:
                    for _ in range(args.mib):
                        f.write(os.urandom(1 << 20))
                os.sync()
                kept, how = taken(root, os.path.dirname(src), "kept", True)
                full, _ = taken(root, os.path.dirname(src), "copied", False)
        except ReflinkFilesystemUnavailable as e:
            emit(
                skipped(
                    "kept_checkpoint_bytes_vs_full_copy",
                    f"no filesystem with reflinks can be made here: {e}",
                )
            )
            return exit_status()
    print(
        f"# XFS: kept {how}: {kept / 2**20:.2f} MiB of blocks; full copy {full / 2**20:.1f} MiB"
    )
    emit(figure("kept_checkpoint_bytes_vs_full_copy", kept / full, "<=", 0.05))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
