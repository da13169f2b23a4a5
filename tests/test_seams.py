# SPDX-License-Identifier: Apache-2.0
"""The seams (areal_compat.seams): on an AReaL that renamed one of PPOTrainer's
hooks, its version unchanged, the run names it at start with what is lost, and
the replay's verdict says what it did not compare instead of "identical"."""

from __future__ import annotations

import pytest
from support.harness import replay_report, run_torchrun
from support.recordings import DROPOUT, SPMD_D1_STEPS
from support.renamed_hook import RENAME_ENV

from areal_debug import areal_compat

pytestmark = pytest.mark.areal

STATS_HOOK = "_export_and_commit_stats"


def _run_without_the_stats_hook(workdir: str, name: str, *overrides: str) -> None:
    """A run whose AReaL renamed ``STATS_HOOK`` (its version unchanged): it
    succeeds and names the seam once, with what is lost."""
    run = run_torchrun(
        workdir,
        name,
        1,
        [*DROPOUT, *overrides],
        env={RENAME_ENV: f"{STATS_HOOK}:{STATS_HOOK}_v2"},
    )
    assert run.returncode == 0, run.log[-3000:]
    said = (
        "statistics recorded and compared not available: "
        f"PPOTrainer.{STATS_HOOK} is missing"
    )
    assert run.log.count(said) == 1, run.log[-3000:]


def test_every_seam_is_there_on_this_areal():
    assert areal_compat.check_seams() == []


def test_a_missing_or_changed_seam_is_named_with_what_is_lost():
    Capability, Seam = areal_compat.Capability, areal_compat.Seam
    trainer = "areal.trainer.rl_trainer:PPOTrainer"
    seams = (
        Seam(f"{trainer}._no_such_hook", Capability.STATISTICS),
        Seam(f"{trainer}._evaluate", Capability.EVALUATION, params=("no_such_param",)),
        Seam("areal.no_such_module:anything", Capability.STAGES, "call"),
        Seam(f"{trainer}._save_recover_checkpoint", Capability.KEPT_CHECKPOINTS),
    )
    missing = areal_compat.check_seams(seams)
    assert [m.problem for m in missing] == [
        "PPOTrainer._no_such_hook is missing",
        "PPOTrainer._evaluate no longer takes no_such_param",
        "module areal.no_such_module is missing",
    ]
    assert missing[0].line() == (
        "statistics recorded and compared not available: "
        "PPOTrainer._no_such_hook is missing"
    )
    assert areal_compat.lost_capabilities(missing) == [
        Capability.STATISTICS.value,
        Capability.STAGES.value,
        Capability.EVALUATION.value,
    ]
    assert not areal_compat.refuses(missing)
    assert areal_compat.refuses(
        areal_compat.check_seams((Seam(f"{trainer}._gone", Capability.RUN),))
    )


def test_a_renamed_hook_is_named_at_start_and_the_replay_says_what_it_did_not_compare(
    spmd_d1,
):
    _run_without_the_stats_hook(
        str(spmd_d1.workdir),
        "renamed-hook",
        f"total_train_steps={SPMD_D1_STEPS}",
        "debug.replay_rollout_data=true",
        "debug.replay_trial_name=renamed",
    )
    report = replay_report(str(spmd_d1.workdir), trial="renamed")
    assert report["summary"]["not_compared"] == [
        f"statistics recorded and compared (PPOTrainer.{STATS_HOOK} is missing in "
        "this AReaL)"
    ], report["summary"]
    assert "NOT compared: statistics recorded and compared" in report["headline"]
    assert "identical to the recording at every step (" not in report["headline"]


def test_a_dump_without_the_stats_hook_names_it_and_coverage_shows_the_gap(
    spmd_d1, capsys
):
    """The dump's AReaL renamed the hook that commits each step's statistics:
    named at start; each step keeps its batch but neither statistics nor stage
    digests (gathered at that commit), and coverage, measured from the steps'
    files, says so in the manifest and inspect; a replay's verdict names it."""
    import json
    import os

    from areal_debug.cli import main

    workdir = str(spmd_d1.workdir)
    _run_without_the_stats_hook(
        workdir,
        "renamed-dump",
        "total_train_steps=2",
        "trial_name=renamed",
        "debug.dump_rollout_data=true",
    )
    recording = os.path.join(
        workdir, "root", "tiny", "renamed", "areal_debug_recording"
    )
    with open(os.path.join(recording, "manifest.json")) as f:
        closed = json.load(f)["coverage"]
    assert closed == {
        "steps": [0, 1],
        "gaps": [
            {"part": "statistics", "what": "", "steps": [0, 1], "ranks": []},
            {"part": "stage digests", "what": "", "steps": [0, 1], "ranks": []},
        ],
    }
    assert main(["inspect", recording]) == 0
    out = capsys.readouterr().out
    assert "coverage    statistics: not recorded at steps 0-1" in out
    assert "coverage    stage digests: not recorded at steps 0-1" in out

    replay = run_torchrun(
        workdir,
        "renamed-dump-replay",
        1,
        [
            *DROPOUT,
            "total_train_steps=2",
            "trial_name=renamed",
            "debug.replay_rollout_data=true",
        ],
    )
    assert replay.returncode == 0, replay.log[-3000:]
    report = replay_report(workdir, trial="renamed_replay")
    assert report["summary"]["not_compared"] == [
        f"statistics recorded and compared (PPOTrainer.{STATS_HOOK} is missing in "
        "the dump run's AReaL)",
        "statistics: not recorded at steps 0-1 in the recording",
        "stage digests: not recorded at steps 0-1 in the recording",
    ], report["summary"]
    assert "NOT compared: statistics recorded and compared" in report["headline"]


def test_a_recording_made_without_a_seam_says_so_in_inspect_and_on_the_page(
    tmp_path, capsys
):
    from test_store import manifest, record, traj

    from areal_debug.cli import main
    from areal_debug.recording.reader import RecordingReader
    from areal_debug.recording.writer.start import write_manifest

    path = str(tmp_path / "rec")
    record(path, {0: [[traj(0)]]})
    gone = areal_compat.MissingSeam(
        f"areal.trainer.rl_trainer:PPOTrainer.{STATS_HOOK}",
        f"PPOTrainer.{STATS_HOOK} is missing",
        areal_compat.Capability.STATISTICS.value,
    )
    write_manifest(path, {**manifest(), "missing_seams": [gone.to_json()]})
    assert RecordingReader(path).manifest.missing_seams == [gone.to_json()]
    assert main(["inspect", path]) == 0
    assert (
        "missing     statistics recorded and compared not recorded: "
        f"PPOTrainer.{STATS_HOOK} is missing in the dump run's AReaL"
    ) in capsys.readouterr().out
    page = tmp_path / "page.html"
    assert main(["report", path, "-o", str(page)]) == 0
    assert (
        "Not recorded: statistics recorded and compared (PPOTrainer."
        f"{STATS_HOOK} is missing in the dump run" in page.read_text()
    )
