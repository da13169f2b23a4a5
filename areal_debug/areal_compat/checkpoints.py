# SPDX-License-Identifier: Apache-2.0
"""Checkpoints and the recover layout: where AReaL keeps a trial's recover
checkpoint, the names it saves its models under, the state it restores, the step
it starts from, and the layout of a recover checkpoint kept with a recording
(``<recording>/recover/step-NNNNNN/``: AReaL's trees under the names here, and
nowhere else).

Imports no AReaL at import time: the recording store's own processes (the
writer process, the reliability suite's stand-in runs) use the kept layout
without loading AReaL.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from typing import TYPE_CHECKING

from areal_debug.logs import get_logger

if TYPE_CHECKING:
    from areal.trainer.rl_trainer import PPOTrainer

logger = get_logger("DebugArealCompat")

# -- AReaL's recover checkpoint ----------------------------------------------------------
# The names PPOTrainer._save_recover_checkpoint saves its models under:
# ``dict(default=self.actor)`` and ``to_save["critic"]`` (rl_trainer.py:1194-1196 in
# 1.0.4, :1206-1208 in 2.0.0); "default" is also Saver.get_recover_checkpoint_path's
# default ``name`` (utils/saver.py:83 in 1.0.4 and 2.0.0).
RECOVER_ACTOR_NAME = "default"
RECOVER_CRITIC_NAME = "critic"


def recover_model_names(with_critic: bool) -> list[str]:
    """The models a recover checkpoint holds, by AReaL's names for them."""
    return [RECOVER_ACTOR_NAME] + ([RECOVER_CRITIC_NAME] if with_critic else [])


def recover_paths(config, trial: str, names: list[str]) -> tuple[str, dict[str, str]]:
    """(recover info dir, {model name: recover checkpoint dir}) of a trial:
    areal/utils/recover.py:168 RecoverHandler.recover_info_path and
    areal/utils/saver.py:79 Saver.get_recover_checkpoint_path (both the same in
    1.0.4 and 2.0.0)."""
    from areal.utils.recover import RecoverHandler
    from areal.utils.saver import Saver

    exp, root = config.experiment_name, config.cluster.fileroot
    info = RecoverHandler.recover_info_path(exp, trial, root)
    ckpts = {
        n: Saver.get_recover_checkpoint_path(exp, trial, root, name=n) for n in names
    }
    return info, ckpts


# -- AReaL's crash-safe recover checkpoints (main after cbff54d) -------------------------
# areal/utils/checkpoint_pointer.py (AReaL main @235010ae; absent from 1.0.4, 2.0.0
# and main @cbff54d): each save is a generation,
# ``<save root>/checkpoint_generations/generation_stepNNNNNNNN/{manifest,
# payloads/<name>}``, published by an atomic JSON pointer ``<save root>/LATEST``;
# the legacy recover_info + ``<name>/recover_checkpoint`` layout is read only
# where no LATEST exists. Detected by the module, never by a version string.
LATEST_POINTER = "LATEST"


class RecoverLayoutError(RuntimeError):
    """A trial's recover checkpoint is in a layout this AReaL cannot resolve."""


def checkpoint_pointer_module():
    """AReaL's ``areal.utils.checkpoint_pointer``, or None where this AReaL
    writes the legacy layout only."""
    try:
        from areal.utils import checkpoint_pointer
    except ImportError:
        return None
    return checkpoint_pointer


def save_root(config, trial: str) -> str:
    """The directory a trial's recover checkpoints live under (its LATEST too):
    areal/utils/saver.py Saver.get_save_root (1.0.4, 2.0.0, main)."""
    from areal.utils.saver import Saver

    return Saver.get_save_root(config.experiment_name, trial, config.cluster.fileroot)


def saved_recover_paths(config, trial: str, names: list[str]) -> tuple[str, dict]:
    """Where the recover checkpoint AReaL saved last for ``trial`` is, as
    ``recover_paths`` gives them: the generation LATEST points to where the save
    root has one, else the legacy directories."""
    root = save_root(config, trial)
    if not os.path.exists(os.path.join(root, LATEST_POINTER)):
        return recover_paths(config, trial, names)
    pointer = checkpoint_pointer_module()
    if pointer is None:
        raise RecoverLayoutError(
            f"{os.path.join(root, LATEST_POINTER)} is a crash-safe checkpoint "
            "pointer, which this AReaL (no areal.utils.checkpoint_pointer) does not "
            "read: the run directory was written by a newer AReaL. Run with the "
            "AReaL that wrote it, or another trial_name."
        )
    try:
        source = pointer.resolve_checkpoint(root, list(names))
    except (RuntimeError, ValueError) as e:  # CheckpointConsistencyError
        raise RecoverLayoutError(
            f"AReaL's checkpoint pointer in {root} names no usable checkpoint: {e}"
        ) from e
    if source is None:
        raise RecoverLayoutError(f"AReaL resolves no recover checkpoint in {root}")
    return source.manifest, dict(source.payloads)


def install_generation(root: str, step: int, names: list[str]) -> tuple[str, dict]:
    """(manifest dir, {name: payload dir}) of a new generation of ``step`` under
    the save root ``root`` (checkpoint_pointer.generation_dir, manifest_dir,
    payload_dir), made empty."""
    import shutil

    pointer = checkpoint_pointer_module()
    generation = pointer.generation_dir(root, step)
    # A fresh trial only: AReaL's LATEST never moves back and each save deletes
    # the generation before it, so generations an earlier replay of this trial
    # left (steps past this one among them) would be saved over or stay behind.
    # They are the replay trial's own output, never the recording.
    generations = os.path.dirname(generation)
    if os.path.isdir(generations):
        logger.info(f"Replay: removing an earlier replay's checkpoints {generations}")
        shutil.rmtree(generations)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pointer.latest_path(root))
    return pointer.manifest_dir(generation), {
        n: pointer.payload_dir(generation, n) for n in names
    }


def generation_pointer(root: str, step: int, names: list[str]) -> tuple[str, str]:
    """(path, text) of the LATEST pointer that publishes the generation of
    ``step`` under the save root ``root``: AReaL's own record
    (checkpoint_pointer.make_record, latest_path). The caller writes it
    atomically once the generation is whole."""
    pointer = checkpoint_pointer_module()
    return pointer.latest_path(root), pointer.make_record(step, list(names)).to_json()


DATALOADER_INFO = "dataloader_info.pkl"


def write_dataloader_state(info_dir: str, state: dict, world_size: int) -> None:
    """Set the dataloader state a recover checkpoint restores.

    AReaL's RecoverInfo (areal/utils/recover.py:91, :125 in 1.0.4 and 2.0.0)
    writes and reads ``dataloader_info.pkl`` with pickle itself, one entry per rank
    in SPMD mode; areal-debug writes only plain JSON values into it.
    """
    with open(os.path.join(info_dir, DATALOADER_INFO), "wb") as f:
        pickle.dump([state] * world_size, f)


# -- where a run starts and what it saved ---------------------------------------------------
def recover_start_step(trainer: PPOTrainer) -> int:
    """The first step ``PPOTrainer.train`` runs (rl_trainer.py:562-566 in 1.0.4,
    574-578 in 2.0.0)."""
    info = trainer.recover_info
    return 0 if info is None else info.last_step_info.next().global_step


def last_recover_step(trainer: PPOTrainer) -> int | None:
    """The global step of the last recover checkpoint AReaL saved
    (areal/utils/recover.py:155, :255 in 1.0.4 and 2.0.0,
    RecoverHandler.last_step_info)."""
    info = getattr(trainer.recover_handler, "last_step_info", None)
    return None if info is None else info.global_step


# -- a recover checkpoint kept with a recording ------------------------------------------
# A kept checkpoint holds a copy of each of AReaL's recover trees of one step: the
# recover info directory (recover_paths' first) and each model's recover checkpoint
# directory (its second, by the model names above).
KEPT_INFO_DIR = "recover_info"
KEPT_MODELS_DIR = "checkpoints"
# The file RecoverInfo.dump writes and RecoverInfo.load reads first in the recover
# info directory (areal/utils/recover.py:71, :104 in 1.0.4; :72, :105 in main): a
# kept checkpoint without it cannot be restored.
STEP_INFO = "step_info.json"


def kept_info_dir(kept: str) -> str:
    """The copy of the recover info directory in the kept checkpoint ``kept``."""
    return os.path.join(kept, KEPT_INFO_DIR)


def kept_model_dir(kept: str, name: str) -> str:
    """The copy of model ``name``'s recover checkpoint in the kept checkpoint."""
    return os.path.join(kept, KEPT_MODELS_DIR, name)


def kept_step_info(kept: str) -> str:
    """AReaL's ``step_info.json`` in the kept checkpoint ``kept``."""
    return os.path.join(kept_info_dir(kept), STEP_INFO)


def kept_trees(kept: str, info: str, ckpts: dict[str, str]) -> list[tuple[str, str]]:
    """(AReaL's directory, its copy in the kept checkpoint ``kept``) for the
    recover info directory ``info`` and each model's recover checkpoint
    (``ckpts``, as ``recover_paths`` returns them): a dump run copies each first
    into its second, a replay each second into its first."""
    return [(info, kept_info_dir(kept))] + [
        (path, kept_model_dir(kept, name)) for name, path in ckpts.items()
    ]
