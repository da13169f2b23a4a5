# SPDX-License-Identifier: Apache-2.0
"""Kept recover checkpoints on a filesystem with reflinks: no second copy on disk,
and still independent of AReaL's in-place rewrite of its checkpoint.

Runs on a loop-mounted XFS (root and mkfs.xfs: ``.ci/run`` installs xfsprogs;
``make test`` installs nothing on the system); skipped, saying why, elsewhere
(failed in CI: support.system_parts).
"""

import hashlib
import os

import pytest
from support.system_parts import missing_system_part
from support.xfs import ReflinkFilesystemUnavailable, used_bytes, xfs_mount

from areal_debug.recording.checkpoints import _TreeCopy

SIZE = 64 << 20


@pytest.fixture
def xfs(tmp_path):
    try:
        with xfs_mount(tmp_path) as mountpoint:
            yield mountpoint
    except ReflinkFilesystemUnavailable as e:
        missing_system_part(f"no filesystem with reflinks here: {e}")


def checkpoint(root) -> str:
    """A recover checkpoint shaped like AReaL's: weights and a small state file."""
    src = os.path.join(root, "ckpt")
    os.makedirs(os.path.join(src, "default"))
    with open(os.path.join(src, "default", "model.safetensors"), "wb") as f:
        f.write(os.urandom(SIZE))
    with open(os.path.join(src, "recover_info.json"), "w") as f:
        f.write('{"step": 3}')
    return src


def sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def test_a_kept_checkpoint_is_a_reflink_and_survives_the_rewrite(xfs):
    src = checkpoint(xfs)
    weights = os.path.join(src, "default", "model.safetensors")
    before_keep, original = used_bytes(xfs), sha(weights)
    copy = _TreeCopy()
    copy.tree(src, os.path.join(xfs, "kept"))
    kept = used_bytes(xfs) - before_keep
    assert (copy.reflinked, copy.copied) == (2, 0)
    assert "reflinked (copy-on-write" in copy.describe()
    # No second copy: the kept tree takes metadata blocks only.
    assert kept < SIZE / 50, f"keeping took {kept} bytes for {SIZE}"

    # AReaL's next save rewrites the same file in place: the kept one stays.
    with open(weights, "r+b") as f:
        f.write(b"step 4" * 1000)
    assert sha(os.path.join(xfs, "kept", "default", "model.safetensors")) == original

    # A full copy, for comparison, takes the whole size again.
    before_copy = used_bytes(xfs)
    full = _TreeCopy()
    full._reflinks = False
    full.tree(src, os.path.join(xfs, "copied"))
    assert full.copied == 2 and used_bytes(xfs) - before_copy >= SIZE
