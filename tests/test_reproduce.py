# SPDX-License-Identifier: Apache-2.0
"""Reproducing a step: RNG restore with dropout, start/end steps, divergence reports.

All replays read the shared ``spmd_d1`` recording: attention dropout 0.3 active
in training, 5 steps, an AReaL recover checkpoint kept after every step.
"""

import shutil

import pytest
from support.harness import assert_identical, replay_report, run_torchrun
from support.recordings import DROPOUT, SPMD_D1_STEPS

pytestmark = [pytest.mark.areal, pytest.mark.spmd_recordings]


def replay(recorded, trial, *overrides, path: str | None = None):
    return run_torchrun(
        str(recorded.workdir),
        trial,
        1,
        [
            *DROPOUT,
            "debug.replay_rollout_data=true",
            f"debug.replay_trial_name={trial}",
            *([f"debug.path={path}"] if path else []),
            *overrides,
        ],
    )


def test_restored_rng_makes_dropout_replay_bitwise(spmd_d1, spmd_d1_replay):
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    report = replay_report(str(spmd_d1.workdir))
    assert_identical(report)
    assert report["summary"]["steps"] == SPMD_D1_STEPS
    # Bitwise stage by stage, the weights after each update included.
    assert report["first_divergence"] is None
    for entry in report["steps"]:
        assert set(entry["stages"]) == {
            "logp",
            "advantages",
            "loss",
            "grads",
            "weights",
        }
        assert all(s["status"] == "identical" for s in entry["stages"].values())
        assert entry["stages"]["weights"]["compared"] > 0
    assert "Every stage identical at every step" in spmd_d1_replay.log


def stage_statuses(entry) -> dict[str, str]:
    return {stage: r["status"] for stage, r in entry["stages"].items()}


def test_without_rng_restore_dropout_diverges(spmd_d1):
    # Proves the test above exercises real training-side randomness.
    run = replay(spmd_d1, "norng", "debug.restore_rng=false", "total_train_steps=2")
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d1.workdir), trial="norng")
    first = report["summary"]["first_divergence"]
    assert first is not None and first["global_step"] == 0
    # Log-probs are recomputed in eval mode (no dropout): the loss, computed in
    # training mode, is the first stage dropout reaches.
    staged = report["first_divergence"]
    assert (staged["step"], staged["stage"]) == (0, "loss")
    assert staged["where"] == "mini-batch 0 micro-batch 0"
    step0 = stage_statuses(report["steps"][0])
    assert step0["logp"] == step0["advantages"] == "identical"
    assert step0["grads"] == step0["weights"] == "differs"


def test_start_step_without_checkpoints_replays_from_the_first_step(spmd_d1, tmp_path):
    # The same recording without its kept recover checkpoints.
    copy = tmp_path / "rec"
    shutil.copytree(spmd_d1.path, copy, ignore=shutil.ignore_patterns("recover"))
    run = replay(
        spmd_d1,
        "start2",
        "debug.replay_start_step=2",
        "total_train_steps=3",
        path=str(copy),
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "no recover checkpoint" in run.log and "replaying from step 0" in run.log
    report = replay_report(str(spmd_d1.workdir), trial="start2")
    assert [e["global_step"] for e in report["steps"]] == [0, 1, 2]
    assert_identical(report)


@pytest.fixture(scope="module")
def clipped_to_step_1(spmd_d1):
    """One run for two facts: replay_end_step=1, and a changed hyperparameter."""
    return replay(spmd_d1, "clip", "debug.replay_end_step=1", "actor.eps_clip=0.01")


def test_end_step_stops_after_it(spmd_d1, clipped_to_step_1):
    run = clipped_to_step_1
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d1.workdir), trial="clip")
    assert [e["global_step"] for e in report["steps"]] == [0, 1]


def test_changed_hyperparameter_is_reported_at_its_first_divergence(
    spmd_d1, clipped_to_step_1
):
    run = clipped_to_step_1
    assert run.returncode == 0, run.log[-3000:]
    first = replay_report(str(spmd_d1.workdir), trial="clip")["summary"][
        "first_divergence"
    ]
    assert first["global_step"] == 0 and first["metric"].startswith("ppo_actor/")
    assert f"First divergence at step 0, metric {first['metric']}" in run.log
    # Located at the loss: what the step computed before it is identical.
    report = replay_report(str(spmd_d1.workdir), trial="clip")
    staged = report["first_divergence"]
    assert (staged["step"], staged["stage"]) == (0, "loss")
    assert staged["abs_diff"] > 0 and "recorded" in staged
    step0 = stage_statuses(report["steps"][0])
    assert step0["logp"] == step0["advantages"] == "identical"
    assert "First divergent stage: loss at step 0" in run.log
    assert "step 0: logp identical; advantages identical; loss differs" in run.log


def test_changed_advantage_normalisation_is_located_at_the_advantages(spmd_d1):
    run = replay(spmd_d1, "advnorm", "total_train_steps=1", "actor.adv_norm=null")
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d1.workdir), trial="advnorm")
    staged = report["first_divergence"]
    assert (staged["step"], staged["stage"]) == (0, "advantages")
    assert staged["where"] == "trajectory 0 advantages"
    assert stage_statuses(report["steps"][0])["logp"] == "identical"


def test_start_step_restores_the_kept_checkpoint_and_replays_bitwise(spmd_d1):
    from areal_debug.recording import checkpoints

    # Every checkpoint AReaL overwrote is still there, kept with the recording.
    assert checkpoints.kept_steps(spmd_d1.path) == [0, 1, 2, 3, 4]
    run = replay(
        spmd_d1,
        "from3",
        f"total_train_steps={SPMD_D1_STEPS}",
        "debug.replay_start_step=3",
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "recover checkpoint of step 2 (kept with the recording)" in run.log
    report = replay_report(str(spmd_d1.workdir), trial="from3")
    assert [e["global_step"] for e in report["steps"]] == [3, 4]
    assert_identical(report)
    # And it is the dump's step 3, not a fresh start: grad norms match the recording.
    recorded = spmd_d1.run.stats_by_step()
    for entry in report["steps"]:
        m = entry["metrics"]["ppo_actor/update/grad_norm"]
        assert (
            m["replayed"]
            == recorded[entry["global_step"]]["ppo_actor/update/grad_norm"]
        )
