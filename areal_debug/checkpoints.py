# SPDX-License-Identifier: Apache-2.0
"""Recover checkpoints kept with a recording, so a replay can start at step N.

AReaL keeps one recover checkpoint per trial and overwrites it at every save.
A dump run copies each one it saves into ``<recording>/recover/step-NNNNNN/``;
a replay that asks for step N installs the latest kept one before N into its
own trial, where AReaL's RecoverHandler restores model, optimizer, and the
ReplayDataLoader position as in any resumed run.
"""

from __future__ import annotations

import os
import shutil

from areal.utils import logging

from areal_debug.areal_compat import recover_paths, write_dataloader_state
from areal_debug.store_format import list_step_dirs, step_dirname

logger = logging.getLogger("DebugCheckpoints")

KEPT = "recover"
_INFO = "recover_info"
_CHECKPOINTS = "checkpoints"


def model_names(config) -> list[str]:
    """The models a recover checkpoint holds: the actor, and the critic if any."""
    return ["default"] + (["critic"] if config.critic is not None else [])


def keep(config, recording: str, step: int, names: list[str]) -> str:
    """Copy the recover checkpoint just saved for ``step`` into the recording."""
    info, ckpts = recover_paths(config, config.trial_name, names)
    dst = os.path.join(recording, KEPT, step_dirname(step))
    tmp = dst + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(info, os.path.join(tmp, _INFO))
        for name, path in ckpts.items():
            shutil.copytree(path, os.path.join(tmp, _CHECKPOINTS, name))
    except BaseException:
        # A copy that failed (disk full) must not keep the space it took.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dst, ignore_errors=True)
    # The rename makes a kept checkpoint all or nothing.
    os.replace(tmp, dst)
    logger.info(f"Kept the recover checkpoint of step {step} in {dst}")
    return dst


def kept_steps(recording: str) -> list[int]:
    root = os.path.join(recording, KEPT)
    return list(list_step_dirs(root)) if os.path.isdir(root) else []


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
    info, ckpts = recover_paths(config, config.trial_name, names)
    shutil.rmtree(info, ignore_errors=True)
    shutil.copytree(os.path.join(src, _INFO), info)
    for name, path in ckpts.items():
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(os.path.join(src, _CHECKPOINTS, name), path)
    # The dump run saved its real dataloader's state; the replay's dataloader
    # is a ReplayDataLoader whose whole state is the next step to yield.
    write_dataloader_state(info, {"next_step": step + 1}, world_size)
