# SPDX-License-Identifier: Apache-2.0
"""Recover checkpoints kept with a recording, so a replay can start at step N.

AReaL keeps one recover checkpoint per trial and overwrites it at every save.
A dump run copies each one it saves into ``<recording>/recover/step-NNNNNN/``;
a replay that asks for step N installs the latest kept one before N into its
own trial, where AReaL's RecoverHandler restores model, optimizer, and the
ReplayDataLoader position as in any resumed run.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil

# AReaL's checkpoint layout, and the names its trees have in a kept checkpoint,
# come from the adapter (areal_compat.checkpoints), which loads no AReaL until a
# path of AReaL's own is asked for: the store's own processes (the writer process,
# the reliability suite's stand-in runs) never load AReaL.
from areal_debug.areal_compat import (
    DATALOADER_INFO,
    checkpoint_pointer_module,
    generation_pointer,
    install_generation,
    kept_info_dir,
    kept_step_info,
    kept_trees,
    read_dataloader_states,
    recover_model_names,
    recover_paths,
    save_root,
    saved_recover_paths,
    write_dataloader_state,
)
from areal_debug.logs import get_logger
from areal_debug.recording.atomic import atomic_write_bytes
from areal_debug.recording.format import KEPT, kept_steps, step_dirname

logger = get_logger("DebugCheckpoints")


def model_names(config) -> list[str]:
    """The models a recover checkpoint holds: the actor, and the critic if any."""
    return recover_model_names(config.critic is not None)


# ioctl(FICLONE): the destination shares the source's blocks until either is
# written (copy-on-write), on XFS, btrfs, bcachefs, OCFS2...
FICLONE = 0x40049409


class _TreeCopy:
    """``shutil.copytree``'s copy function: a reflink where the filesystem
    allows it, else a copy; counts which.

    Hard links are never used: AReaL rewrites its recover checkpoint in place
    (the same file names opened for writing), which would change a hard-linked
    kept copy too; a reflink is a separate file.
    """

    def __init__(self):
        self.reflinked = 0
        self.copied = 0
        self.bytes = 0
        self._reflinks = True

    def __call__(self, src: str, dst: str) -> str:
        self.bytes += os.path.getsize(src)
        if self._reflinks and _reflink(src, dst):
            self.reflinked += 1
            shutil.copystat(src, dst)
            return dst
        # One refusal says it for the whole filesystem.
        self._reflinks = False
        self.copied += 1
        return shutil.copy2(src, dst)

    def tree(self, src: str, dst: str) -> None:
        shutil.copytree(src, dst, copy_function=self)

    def describe(self) -> str:
        size = f"{self.bytes / 2**20:.1f} MiB"
        if self.copied == 0 and self.reflinked:
            return f"{size} reflinked (copy-on-write: no second copy on disk)"
        return f"{size} copied (this filesystem has no reflinks: a full copy)"


def _reflink(src: str, dst: str) -> bool:
    try:
        with open(src, "rb") as s, open(dst, "wb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        return True
    except OSError:
        return False


def keep(config, recording: str, step: int, names: list[str]) -> str:
    """Copy the recover checkpoint just saved for ``step`` into the recording
    (from the generation AReaL's LATEST pointer names, where it has one)."""
    info, ckpts = saved_recover_paths(config, config.trial_name, names)
    return keep_dirs(recording, step, info, ckpts)


def keep_dirs(recording: str, step: int, info: str, ckpts: dict[str, str]) -> str:
    """Copy the recover info dir and each model's checkpoint dir of ``step``
    into the recording, all or nothing."""
    dst = os.path.join(recording, KEPT, step_dirname(step))
    tmp = dst + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    copy = _TreeCopy()
    try:
        for tree, kept in kept_trees(tmp, info, ckpts):
            copy.tree(tree, kept)
    except BaseException:
        # A copy that failed (disk full) must not keep the space it took.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dst, ignore_errors=True)
    # The rename makes a kept checkpoint all or nothing.
    os.replace(tmp, dst)
    logger.info(
        f"Kept the recover checkpoint of step {step} in {dst}: {copy.describe()}"
    )
    return dst


def latest_before(recording: str, step: int) -> int | None:
    """The latest kept checkpoint that restores the policy before ``step``."""
    usable = [k for k in kept_steps(recording) if k <= step - 1]
    return max(usable) if usable else None


def install(
    config, recording: str, step: int, names: list[str], world_size: int
) -> None:
    """Put the kept checkpoint of ``step`` where AReaL's RecoverHandler looks for
    this replay's trial, pointing the dataloader position at the next step."""
    src = os.path.join(recording, KEPT, step_dirname(step))
    # An AReaL with crash-safe checkpoints reads the generation its LATEST
    # pointer names and a legacy tree only where there is none: the kept trees go
    # into a generation of their own, published once they are whole.
    generations = checkpoint_pointer_module() is not None
    if generations:
        root = save_root(config, config.trial_name)
        info, ckpts = install_generation(root, step, names)
    else:
        info, ckpts = recover_paths(config, config.trial_name, names)
    copy = _TreeCopy()
    for tree, kept in kept_trees(src, info, ckpts):
        shutil.rmtree(tree, ignore_errors=True)
        copy.tree(kept, tree)
    # The dump run saved its real dataloader's state; the replay's dataloader
    # is a ReplayDataLoader whose whole state is the next step to yield.
    write_dataloader_state(info, {"next_step": step + 1}, world_size)
    if generations:
        # Whatever LATEST pointed to before goes: this is the replay's own trial,
        # which it starts afresh.
        path, text = generation_pointer(root, step, names)
        atomic_write_bytes(path, text.encode())


def kept_position(recording: str, step: int) -> tuple[dict, list[dict]] | None:
    """(AReaL's step info, the dataloader state of each rank) in the recover
    checkpoint of ``step`` kept with the recording; None where none is kept or
    it cannot be read. The states are read as plain values
    (``areal_compat.read_dataloader_states``: nothing in them is called)."""
    kept = os.path.join(recording, KEPT, step_dirname(step))
    try:
        with open(kept_step_info(kept)) as f:
            info = json.load(f)
        states = read_dataloader_states(
            os.path.join(kept_info_dir(kept), DATALOADER_INFO)
        )
    except Exception as e:  # a file this reader cannot take as plain values
        logger.debug(f"No dataloader position in {kept}: {e!r}")
        return None
    return (info, states) if isinstance(info, dict) and states else None
