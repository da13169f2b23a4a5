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


def replay(recorded, trial, *overrides, path: str | None = None, named: bool = True):
    return run_torchrun(
        str(recorded.workdir),
        trial,
        1,
        [
            *DROPOUT,
            "debug.replay_rollout_data=true",
            *([f"debug.replay_trial_name={trial}"] if named else []),
            *([f"debug.path={path}"] if path else []),
            *overrides,
        ],
    )


def test_restored_rng_makes_dropout_replay_bitwise(spmd_d1, spmd_d1_replay):
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    report = replay_report(str(spmd_d1.workdir))
    assert_identical(report)
    # The model is the recorded one, checked before step 0 trains.
    assert (
        "Replay: the model is the recorded one (the weights the dump run started "
        "step 0 from: all " in spmd_d1_replay.log
    )
    assert report["model"]["status"] == "identical"
    assert report["summary"]["steps"] == SPMD_D1_STEPS
    # Bitwise stage by stage, the weights after each update included.
    assert report["first_divergence"] is None
    for entry in report["steps"]:
        # The model's digests at the first step only: each run's first.
        assert set(entry["stages"]) - {"model"} == {
            "logp",
            "advantages",
            "loss",
            "grads",
            "weights",
        }
        assert all(s["status"] == "identical" for s in entry["stages"].values())
        assert entry["stages"]["weights"]["compared"] > 0
        # Step 0's layers (debug.layer_digests=0 in the dump; the replay digests
        # every step the recording has them of), identical too: 2 layers of 5
        # modules, the final norm and the logits.
        layers = entry["stages"]["logp"].get("layers")
        if entry["global_step"] == 0:
            assert layers["status"] == "identical" and layers["modules"] == 12
        else:
            assert layers is None
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


@pytest.fixture(scope="module")
def clipped_to_step_1(spmd_d1, tmp_path_factory):
    """One run for three facts: replay_end_step=1; a replay_start_step with no
    kept recover checkpoint before it (the recording copied without them); and a
    changed hyperparameter. (That the steps replayed from 0 are bitwise is the
    whole recording's replay: test_restored_rng_makes_dropout_replay_bitwise.)"""
    copy = tmp_path_factory.mktemp("clip") / "rec"
    shutil.copytree(spmd_d1.path, copy, ignore=shutil.ignore_patterns("recover"))
    return replay(
        spmd_d1,
        "clip",
        "debug.replay_start_step=1",
        "debug.replay_end_step=1",
        "actor.eps_clip=0.01",
        path=str(copy),
    )


def test_end_step_stops_after_it(spmd_d1, clipped_to_step_1):
    run = clipped_to_step_1
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d1.workdir), trial="clip")
    assert [e["global_step"] for e in report["steps"]] == [0, 1]


def test_start_step_without_checkpoints_replays_from_the_first_step(
    spmd_d1, clipped_to_step_1
):
    run = clipped_to_step_1
    assert run.returncode == 0, run.log[-3000:]
    assert "no recover checkpoint" in run.log and "replaying from step 0" in run.log
    report = replay_report(str(spmd_d1.workdir), trial="clip")
    assert report["steps"][0]["global_step"] == 0


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
    # The model is the recorded one: the first stage walked at a run's first step.
    assert (
        "step 0: model identical; logp identical; advantages identical; loss differs"
        in run.log
    )


def test_changed_advantage_normalisation_is_located_at_the_advantages(
    spmd_d1, spmd_d1_replay
):
    # Unnamed, after the identical replay of the whole recording (t0_replay):
    # this one gets a trial of its own and leaves that report as it was.
    kept = replay_report(str(spmd_d1.workdir))
    run = replay(
        spmd_d1, "advnorm", "total_train_steps=1", "actor.adv_norm=null", named=False
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "runs as trial t0_replay2; the earlier replays' reports (t0_replay)" in (
        run.log
    )
    assert replay_report(str(spmd_d1.workdir)) == kept
    report = replay_report(str(spmd_d1.workdir), trial="t0_replay2")
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
    # The weights restored are the dump run's after step 2, checked before step 3.
    assert (
        "Replay: the model is the recorded one (the dump run's weights after step 2: "
        "all " in run.log
    )
    assert report["model"]["status"] == "identical"
    # And it is the dump's step 3, not a fresh start: grad norms match the recording.
    recorded = spmd_d1.run.stats_by_step()
    for entry in report["steps"]:
        m = entry["metrics"]["ppo_actor/update/grad_norm"]
        assert (
            m["replayed"]
            == recorded[entry["global_step"]]["ppo_actor/update/grad_norm"]
        )


def test_a_model_that_is_not_the_recorded_one_is_said_before_the_first_step(
    spmd_d1, tmp_path
):
    """actor.path at a copy of the model with one weight nudged: the replay says
    the model is not the recorded one, and which parameter, before step 0
    trains; debug.fail_on_divergence stops it there (issue 39, point 2)."""
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(spmd_d1.workdir / "model", model)
    (weights,) = model.glob("*.safetensors")
    tensors = load_file(weights)
    name = next(n for n in sorted(tensors) if "layers.0" in n and "weight" in n)
    tensors[name][0].add_(1e-3)
    save_file(tensors, weights, metadata={"format": "pt"})
    run = replay(
        spmd_d1,
        "othermodel",
        "total_train_steps=2",
        f"actor.path={model}",
        "debug.fail_on_divergence=true",
    )
    assert run.returncode != 0
    line = next(
        x
        for x in run.log.splitlines()
        if "Replay: the model is not the recorded one:" in x
    )
    assert "the weights step 0 starts from differ from the weights the dump run" in line
    assert "in 1 of " in line and f"actor.path is {model}" in line
    assert "Stopping (debug.fail_on_divergence)" in line
    report = replay_report(str(spmd_d1.workdir), trial="othermodel")
    assert report["steps"] == []  # stopped before step 0 trained
    result = report["model"]
    assert result["status"] == "differs" and result["differing"] == 1
    assert result["where"].endswith(name.removeprefix("model."))
    assert report["headline"].startswith("the model is not the recorded one (1 of ")
    # The story names the settings that explain it.
    assert "you changed actor.path" in report["headline"]
