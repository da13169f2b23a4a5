# SPDX-License-Identifier: Apache-2.0
"""A script shaped like AReaL 1.0.4's own gsm8k example, recorded and replayed.

``tests/scripts/gsm8k_rl.py`` keeps AReaL's way of working: its own config class
(in ``__main__``), its own trainer subclass, ``get_custom_dataset`` (AReaL's data
service in single-controller mode), a YAML with no ``allocation_mode`` and no
``debug:`` section. The dump runs against the CPU server; the replay runs the
unchanged script with no server, no rollout worker and no data service.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.harness import (
    assert_identical,
    assert_only_in_dump,
    recording_dir,
    replay_report,
)
from support.scripts import SCRIPTS_SEED, env_for, processes_of, run_script

from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.names import StageTensorKey
from areal_debug.stages.recorded_ref_logp import ref_logp_tensors

pytestmark = [pytest.mark.areal, pytest.mark.scheduler(seed=SCRIPTS_SEED)]

STEPS = 2


@dataclass(frozen=True)
class Example:
    config: str
    experiment: str
    # Timings (in the logged statistics) only this config's training side has.
    marker_stats: tuple[str, ...] = ()
    # A teacher served as an inference engine: the dump gets its own CPU server.
    teacher: bool = False


EXAMPLES = {
    # One run for three kinds of model beside the actor: critic values and
    # reference log-probs computed on the training side (replayed by computing
    # the values again and reading the log-probs from the recording), and a
    # teacher served as an inference engine (distillation; replayed from its
    # recorded log-probs).
    "critic-ref-teacher": Example(
        "gsm8k_distill_cpu.yaml",
        "gsm8k-distill",
        ("timeperf/critic_values", "timeperf/critic_train_step", "timeperf/ref_logp"),
        teacher=True,
    ),
}


def run_example(workdir, example: Example, name, overrides, server=None, teacher=None):
    return run_script(
        workdir, "gsm8k_rl.py", example.config, name, overrides, server, teacher
    )


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request) -> Example:
    return EXAMPLES[request.param]


@pytest.fixture(scope="module")
def gsm8k_dump(gsm8k_workdir, example):
    from areal_debug.testing import end_process, start_server

    servers = []
    try:
        servers.append(start_server(gsm8k_workdir, env_for(gsm8k_workdir)))
        if example.teacher:
            # The teacher keeps its weights; the rollout server gets the actor's.
            servers.append(
                start_server(gsm8k_workdir, env_for(gsm8k_workdir), name="teacher")
            )
        addrs = [addr for _, addr in servers]
        rc, log = run_example(
            gsm8k_workdir,
            example,
            f"dump-{example.experiment}",
            [
                "debug.dump_rollout_data=true",
                "debug.deterministic=true",
                # Kept for the replay that skips the reference forward pass.
                "debug.record_ref_logp=true",
            ],
            *addrs,
        )
    finally:
        for proc, _ in servers:
            end_process(proc)
    assert processes_of(gsm8k_workdir) == []
    assert rc == 0, log[-4000:]
    return log


def test_dump_of_an_unchanged_example_script(gsm8k_workdir, example, gsm8k_dump):
    # The data service served the datasets (AReaL's default in this mode).
    assert "role 'data" in gsm8k_dump
    assert "ScriptTrainer.train (export_style=concat)" in gsm8k_dump
    assert "lives in the script's __main__" in gsm8k_dump
    reader = RecordingReader(
        recording_dir(str(gsm8k_workdir), example.experiment, "trial0")
    )
    assert reader.available_steps() == list(range(STEPS))
    manifest = reader.manifest
    assert manifest.config["export_style"] == "concat"
    assert manifest.config["debug"]["dump_rollout_data"] is True
    assert all(w["torch_deterministic_algorithms"] for w in manifest.worker_determinism)
    for key in example.marker_stats:
        assert key in gsm8k_dump, key
    for step in range(STEPS):
        batch = reader.load_shard(step, 0)
        assert len(batch) == 8 and batch[0]["input_ids"].shape[0] == 4
        stats = reader.recorded_stats(step)
        if example.marker_stats:
            # The KL penalty against the reference model is in the rewards.
            assert stats["ppo_actor/kl_rewards/avg"] != 0.0
        if example.teacher:
            # One score per generated token of each trajectory, from the teacher.
            logps = reader.recorded_teacher_logp(step)
            assert [t.shape for t in logps] == [t["loss_mask"].shape for t in batch]
            for t, traj in zip(logps, batch, strict=True):
                scored = traj["loss_mask"].bool()
                assert bool((t[scored] < 0).all()) and bool((t[~scored] == 0).all())
    assert manifest.recorded_teacher_logp is example.teacher
    # The stages were digested in the RPC workers: the critic's values and the
    # reference's log-probs too, and those log-probs kept in full
    # (debug.record_ref_logp), one per trajectory of the worker's share.
    stages, tensors = reader.recorded_stages(0)
    assert sorted(stages["ranks"][0]) == [
        "advantages",
        "logp",
        "loss",
        "ref_logp",
        "values",
    ]
    assert sorted(stages["global"]) == ["grads", "model", "weights"]
    # And the actor's recomputed log-probs (debug.record_trainer_logp, default).
    stages_kept = {StageTensorKey.parse(name).stage for name in tensors or {}}
    assert stages_kept == {"ref_logp", "logp"}
    # Each trajectory's log-probs, and the tokens they were computed for.
    assert len(ref_logp_tensors(tensors)) == len(stages["ranks"][0]["ref_logp"])
    assert len(tensors) == 4 * len(stages["ranks"][0]["ref_logp"])
    assert {t.shape[0] for t in tensors.values()} == {4}
    if example.teacher:
        assert "The teacher workers attach to running inference servers" in gsm8k_dump
        assert "role 'teacher'" in gsm8k_dump


def test_replay_starts_only_what_trains_and_runs_no_reference_forward(
    gsm8k_workdir, example, gsm8k_dump
):
    """The unchanged script's replay, the reference's log-probs read from the
    recording (handed to the reference engine in its RPC worker) instead of its
    forward pass; the critic's values computed again. (The reference computed
    again, as replays do by default: the SPMD launcher's replay of this script,
    test_example_script_launcher.py.)"""
    rc, log = run_example(
        gsm8k_workdir,
        example,
        f"replay-ref-{example.experiment}",
        [
            "debug.replay_rollout_data=true",
            "debug.deterministic=true",
            "debug.replay_recorded_ref_logp=true",
            "debug.replay_trial_name=recorded_ref",
        ],
    )
    assert rc == 0, log[-4000:]
    assert "Creating 1 workers for role 'actor'" in log
    # No rollout worker, no inference server, no data service, no dataset read.
    started = ["role 'rollout'", "role 'data"]
    started += ["role 'teacher'"] if example.teacher else []
    assert_only_in_dump(gsm8k_dump, log, started)
    assert "the datasets are not read" in log
    assert "ScriptTrainer.train (export_style=concat)" in log
    if example.teacher:
        assert "the teacher's log-probs come from the recording" in log
    assert "the reference log-probs come from the recording" in log
    assert "reference forward passes run: 0." in log
    report = replay_report(str(gsm8k_workdir), example.experiment, "recorded_ref")
    assert_identical(report)
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        assert len(entry["metrics"]) > 90
        # Every stage identical, the reference's and critic's included.
        assert {s["status"] for s in entry["stages"].values()} == {"identical"}
        assert {"ref_logp", "values", "weights"} <= set(entry["stages"])
        ref = entry["stages"]["ref_logp"]
        # Counted on the reference engine's forward in its workers.
        assert ref["source"] == "recorded" and ref["reference_forwards"] == 0
