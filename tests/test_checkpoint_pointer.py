# SPDX-License-Identifier: Apache-2.0
"""Kept recover checkpoints and AReaL's crash-safe checkpoint pointer.

AReaL main after cbff54d (areal/utils/checkpoint_pointer.py @235010ae) saves each
recover checkpoint as a generation published by an atomic ``LATEST`` pointer and
reads the legacy layout only where no ``LATEST`` exists. Synthetic where it must
be: no AReaL build we can install has that module, so those tests put a stand-in
of it (tests/support/checkpoint_pointer_standin.py, the layout only) where AReaL's
would be. The legacy paths are the installed AReaL's own (Saver, RecoverHandler).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from types import SimpleNamespace

import pytest
from support import checkpoint_pointer_standin as standin

from areal_debug import areal_compat
from areal_debug.recording import checkpoints
from areal_debug.recording.format import KEPT, TEMPORARY_PREFIX, step_dirname

NAMES = ["default"]
pytestmark = pytest.mark.each_areal


def _config(tmp_path, trial: str):
    return SimpleNamespace(
        experiment_name="exp",
        trial_name=trial,
        cluster=SimpleNamespace(fileroot=str(tmp_path / "fileroot")),
    )


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


@pytest.fixture
def with_pointer(monkeypatch):
    """This AReaL 'has' areal.utils.checkpoint_pointer (the stand-in)."""
    monkeypatch.setitem(sys.modules, "areal.utils.checkpoint_pointer", standin)
    assert areal_compat.checkpoint_pointer_module() is standin


def _dump_trial_with_generation(config, step: int) -> str:
    """A dump run's save root as that AReaL leaves it: a stale legacy tree from
    an older save and the generation of ``step`` that LATEST points to."""
    root = areal_compat.save_root(config, config.trial_name)
    _write(os.path.join(root, "recover_info", "step_info.json"), "stale")
    _write(os.path.join(root, "default", "recover_checkpoint", "w.bin"), "stale")
    generation = standin.generation_dir(root, step)
    _write(os.path.join(standin.manifest_dir(generation), "step_info.json"), "new")
    _write(os.path.join(standin.payload_dir(generation, "default"), "w.bin"), "new")
    _write(standin.latest_path(root), standin.make_record(step, NAMES).to_json())
    return root


def test_a_dump_keeps_the_generation_latest_names_not_a_stale_legacy_tree(
    tmp_path, with_pointer
):
    config = _config(tmp_path, "dump")
    _dump_trial_with_generation(config, 3)
    kept = checkpoints.keep(config, str(tmp_path / "rec"), 3, NAMES)
    assert _read(areal_compat.kept_step_info(kept)) == "new"
    assert (
        _read(os.path.join(areal_compat.kept_model_dir(kept, "default"), "w.bin"))
        == "new"
    )


def test_a_replay_installs_a_generation_and_points_latest_at_it(tmp_path, with_pointer):
    config = _config(tmp_path, "dump")
    _dump_trial_with_generation(config, 3)
    recording = str(tmp_path / "rec")
    checkpoints.keep(config, recording, 3, NAMES)
    # The replay's trial holds a LATEST of its own from an earlier replay (step 7):
    # AReaL would read that one, and ignore a legacy tree put beside it.
    replay = _config(tmp_path, "replay")
    root = areal_compat.save_root(replay, "replay")
    _dump_trial_with_generation(replay, 7)
    checkpoints.install(replay, recording, 3, NAMES, world_size=2)
    pointer = json.loads(_read(standin.latest_path(root)))
    assert (pointer["global_step"], pointer["engines"]) == (3, NAMES)
    # Planted in a fresh trial: the earlier replay's generation of step 7 is gone
    # (AReaL's LATEST never moves back, and its saves delete only the generation
    # before them: step 7's would be saved over, or stay behind).
    generations = os.path.dirname(standin.generation_dir(root, 3))
    assert os.listdir(generations) == [standin.generation_dirname(3)]
    # What AReaL would resolve: the kept files, and the replay's dataloader position.
    source = standin.resolve_checkpoint(root, NAMES)
    assert _read(os.path.join(source.manifest, "step_info.json")) == "new"
    assert _read(os.path.join(source.payloads["default"], "w.bin")) == "new"
    with open(os.path.join(source.manifest, areal_compat.DATALOADER_INFO), "rb") as f:
        assert pickle.load(f) == [{"next_step": 4}] * 2
    # Written atomically: no temporary file of the write is left beside it.
    assert [n for n in os.listdir(root) if n.startswith(TEMPORARY_PREFIX)] == []


def test_without_the_module_the_legacy_layout_and_a_pointer_it_cannot_read(
    tmp_path, monkeypatch
):
    """An AReaL without the module (1.0.4, 2.0.0, main @cbff54d; forced here, so
    the test holds on a build that has it): legacy trees; a trial written by a
    newer AReaL is named, not silently kept stale."""
    config = _config(tmp_path, "dump")
    with pytest.MonkeyPatch.context() as m:
        m.setitem(sys.modules, "areal.utils.checkpoint_pointer", standin)
        root = _dump_trial_with_generation(config, 3)
    # None in sys.modules: the import raises ImportError, as where no file is.
    monkeypatch.setitem(sys.modules, "areal.utils.checkpoint_pointer", None)
    assert areal_compat.checkpoint_pointer_module() is None
    with pytest.raises(areal_compat.RecoverLayoutError) as e:
        checkpoints.keep(config, str(tmp_path / "rec"), 3, NAMES)
    assert os.path.join(root, "LATEST") in str(e.value)
    assert "newer AReaL" in str(e.value)
    os.remove(os.path.join(root, "LATEST"))
    kept = checkpoints.keep(config, str(tmp_path / "rec"), 3, NAMES)
    assert _read(areal_compat.kept_step_info(kept)) == "stale"
    assert os.path.isdir(os.path.join(str(tmp_path / "rec"), KEPT, step_dirname(3)))
    replay = _config(tmp_path, "replay")
    checkpoints.install(replay, str(tmp_path / "rec"), 3, NAMES, world_size=1)
    info, _ = areal_compat.recover_paths(replay, "replay", NAMES)
    assert _read(os.path.join(info, "step_info.json")) == "stale"
