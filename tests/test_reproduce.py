# SPDX-License-Identifier: Apache-2.0
"""Reproducing a step: RNG restore with dropout, start/end steps, divergence reports."""

import os

import pytest
from support.harness import replay_report, run_torchrun

pytestmark = pytest.mark.areal

DROPOUT = ["actor.disable_dropout=false"]


@pytest.fixture(scope="module")
def dropout_dump(tmp_path_factory, tiny_assets):
    """3 steps recorded with attention dropout 0.3 active in training."""
    from areal_debug.tooling.tiny_task import build_tiny_model

    d = tmp_path_factory.mktemp("dropout")
    build_tiny_model(str(d / "model"), dropout=0.3)
    os.symlink(tiny_assets / "data.jsonl", d / "data.jsonl")
    run = run_torchrun(str(d), "dump", 1, [*DROPOUT, "debug.dump_rollout_data=true"])
    assert run.returncode == 0, run.log[-3000:]
    return d, run


def replay(workdir, trial, *overrides):
    return run_torchrun(
        str(workdir),
        trial,
        1,
        [
            *DROPOUT,
            "debug.replay_rollout_data=true",
            f"debug.replay_trial_name={trial}",
            *overrides,
        ],
    )


def test_restored_rng_makes_dropout_replay_bitwise(dropout_dump):
    workdir, _ = dropout_dump
    run = replay(workdir, "rng")
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(workdir), trial="rng")
    assert report["summary"]["all_identical"] is True
    assert report["summary"]["steps"] == 3


def test_without_rng_restore_dropout_diverges(dropout_dump):
    # Proves the test above exercises real training-side randomness.
    workdir, _ = dropout_dump
    run = replay(workdir, "norng", "debug.restore_rng=false")
    assert run.returncode == 0, run.log[-3000:]
    first = replay_report(str(workdir), trial="norng")["summary"]["first_divergence"]
    assert first is not None and first["global_step"] == 0


def test_start_step_without_checkpoints_replays_from_the_first_step(dropout_dump):
    workdir, _ = dropout_dump
    run = replay(workdir, "start2", "debug.replay_start_step=2")
    assert run.returncode == 0, run.log[-3000:]
    assert "no recover checkpoint" in run.log and "replaying from step 0" in run.log
    report = replay_report(str(workdir), trial="start2")
    assert [e["global_step"] for e in report["steps"]] == [0, 1, 2]
    assert report["summary"]["all_identical"] is True


def test_end_step_stops_after_it(dropout_dump):
    workdir, _ = dropout_dump
    run = replay(workdir, "end1", "debug.replay_end_step=1")
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(workdir), trial="end1")
    assert [e["global_step"] for e in report["steps"]] == [0, 1]


def test_changed_hyperparameter_is_reported_at_its_first_divergence(dropout_dump):
    workdir, _ = dropout_dump
    run = replay(workdir, "clip", "actor.eps_clip=0.01")
    assert run.returncode == 0, run.log[-3000:]
    first = replay_report(str(workdir), trial="clip")["summary"]["first_divergence"]
    assert first["global_step"] == 0 and first["metric"].startswith("ppo_actor/")
    assert f"First divergence at step 0, metric {first['metric']}" in run.log


def test_fail_on_divergence_stops_with_a_nonzero_exit(dropout_dump):
    workdir, _ = dropout_dump
    run = replay(
        workdir, "failfast", "actor.optimizer.lr=0.5", "debug.fail_on_divergence=true"
    )
    assert run.returncode != 0
    assert "Stopping (debug.fail_on_divergence)" in run.log
    report = replay_report(str(workdir), trial="failfast")
    first = report["summary"]["first_divergence"]
    assert first is not None
    # It stopped at the first divergent step instead of running all three.
    assert len(report["steps"]) == first["global_step"] + 1


@pytest.fixture(scope="module")
def checkpointed_dump(tmp_path_factory, dropout_dump):
    """5 steps recorded with an AReaL recover checkpoint saved after every step."""
    model_dir = dropout_dump[0] / "model"
    d = tmp_path_factory.mktemp("checkpointed")
    os.symlink(model_dir, d / "model")
    os.symlink(dropout_dump[0] / "data.jsonl", d / "data.jsonl")
    run = run_torchrun(
        str(d),
        "dump",
        1,
        [
            *DROPOUT,
            "total_train_steps=5",
            "debug.dump_rollout_data=true",
            "recover.mode=on",
            "++recover.freq_steps=1",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    return d, run


def test_start_step_restores_the_kept_checkpoint_and_replays_bitwise(checkpointed_dump):
    from support.harness import recording_dir

    from areal_debug import checkpoints

    workdir, dump = checkpointed_dump
    # Every checkpoint AReaL overwrote is still there, kept with the recording.
    assert checkpoints.kept_steps(recording_dir(str(workdir))) == [0, 1, 2, 3, 4]
    run = run_torchrun(
        str(workdir),
        "from3",
        1,
        [
            *DROPOUT,
            "total_train_steps=5",
            "debug.replay_rollout_data=true",
            "debug.replay_start_step=3",
            "debug.replay_trial_name=from3",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "recover checkpoint of step 2 (kept with the recording)" in run.log
    report = replay_report(str(workdir), trial="from3")
    assert [e["global_step"] for e in report["steps"]] == [3, 4]
    assert report["summary"]["all_identical"] is True
    # And it is the dump's step 3, not a fresh start: grad norms match the recording.
    recorded = dump.stats_by_step()
    for entry in report["steps"]:
        m = entry["metrics"]["ppo_actor/update/grad_norm"]
        assert (
            m["replayed"]
            == recorded[entry["global_step"]]["ppo_actor/update/grad_norm"]
        )
