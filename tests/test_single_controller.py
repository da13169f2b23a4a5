# SPDX-License-Identifier: Apache-2.0
"""Dump and replay in AReaL's single-controller mode (scheduler.type: local).

The real thing end to end: the shipped example and configs, AReaL's
LocalScheduler starting RPC workers, its RolloutController with
RemoteSGLangEngine workers attached to the CPU server, its TrainController
with FSDP workers. The recording and its same-mode replay are the
single-controller demo's (``sc_d2``); cross-mode replays go through torchrun.
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest
from support.harness import (
    assert_identical,
    assert_only_in_dump,
    assert_whole_batch_statistics_kept,
    end_session,
    example_command,
    example_env,
    replay_report,
    rpc_workers,
    run_example,
    start_logged,
)
from support.recordings import SC_EXPERIMENT, SC_STEPS, SC_TRAIN_D2, SC_TRIAL
from support.waiting import wait_until

from areal_debug.recording.reader import RecordingReader

pytestmark = [pytest.mark.areal, pytest.mark.scheduler]

SC = "single-controller"
CROSS_MODE_SEED = 3
STEPS = SC_STEPS
EXP = SC_EXPERIMENT
TRAIN_D2 = SC_TRAIN_D2


def recording(workdir, trial: str) -> str:
    return os.path.join(workdir, "root", EXP, trial, "areal_debug_recording")


def assert_no_workers_left(workdir, grace: float = 5.0) -> None:
    """Every RPC worker of the run has exited (zombies aside)."""
    wait_until(
        lambda: not rpc_workers(workdir),
        grace,
        lambda: str([" ".join(p.cmdline()) for p in rpc_workers(workdir)]),
        interval=0.2,
    )


def assert_finite_replay(report: dict) -> None:
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        replayed = [m["replayed"] for m in entry["metrics"].values() if "replayed" in m]
        assert "ppo_actor/update/grad_norm" in entry["metrics"]
        assert replayed and all(math.isfinite(v) for v in replayed)


def replay(workdir, mode: str, trial: str, replay_trial: str, *extra, nproc=1):
    overrides = [
        "debug.replay_rollout_data=true",
        f"total_train_steps={STEPS}",
        f"trial_name={trial}",
        f"debug.replay_trial_name={replay_trial}",
        *extra,
    ]
    return run_example(workdir, f"replay-{replay_trial}", mode, overrides, nproc=nproc)


@pytest.mark.each_areal
def test_dump_records_one_shard_per_step_on_the_controller(sc_d2):
    assert "The rollout workers attach to running inference servers" in sc_d2.run.log
    reader = RecordingReader(sc_d2.path)
    layout = reader.manifest.layout
    assert layout.mode == SC
    assert layout.num_shards == 1 and layout.train_dp_size == 2
    assert reader.available_steps() == list(range(STEPS))
    for step in range(STEPS):
        batch = reader.load_shard(step, 0)
        # batch_size 8 prompts x n_samples 4, one dict per prompt, fetched tensors.
        assert len(batch) == 8
        assert batch[0]["input_ids"].shape[0] == 4
        assert batch[0]["input_ids"].device.type == "cpu"
        assert not batch[0]["input_ids"].is_meta
        assert reader.recorded_stats(step)
    # debug.deterministic (the shipped config) reached every RPC worker: the
    # rollout worker and both actor workers report what they ran with.
    workers = reader.manifest.worker_determinism
    assert len(workers) == 3, workers
    for settings in workers:
        assert settings["torch_deterministic_algorithms"] is True
        assert settings["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert reader.manifest.config["debug"]["deterministic"] is True
    # Stage digests were taken in the two actor workers, each its own
    # trajectories and FSDP shards, and gathered by the controller.
    # Step 0's layers too (debug.layer_digests=0), each worker its own samples.
    stages, _ = reader.recorded_stages(0)
    assert [sorted(r) for r in stages["ranks"]] == [
        ["advantages", "layers", "logp", "loss"]
    ] * 2
    assert [sorted(r) for r in reader.recorded_stages(1)[0]["ranks"]] == [
        ["advantages", "logp", "loss"]
    ] * 2
    # The model's weights as the run started, once, at its first step.
    assert sorted(stages["global"]) == ["grads", "model", "weights"]
    assert len(stages["global"]["weights"]) > 0
    assert len(stages["global"]["model"]) > 0
    assert "model" not in reader.recorded_stages(1)[0]["global"]
    assert_no_workers_left(sc_d2.workdir)


@pytest.mark.each_areal
def test_same_mode_replay_is_bitwise_without_rollout_workers(sc_d2):
    # The demo's own replay, by its run_replay.sh.
    run = sc_d2.replay
    # Only the actor's workers: no rollout worker, no server.
    assert "Creating 2 workers for role 'actor'" in run.log
    assert_only_in_dump(sc_d2.run.log, run.log, ["role 'rollout'"])
    report = replay_report(str(sc_d2.workdir), EXP, f"{SC_TRIAL}_replay")
    assert report["topology"]["changed"] is False
    assert_identical(report)
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        assert len(entry["metrics"]) > 90
        assert all(m["status"] == "identical" for m in entry["metrics"].values())
        # Every stage, digested in the workers, weights included; at the first
        # step the weights it started from too (the model).
        stages = ("logp", "advantages", "loss", "grads", "weights")
        if entry["global_step"] == 0:
            stages = ("model", *stages)
        assert {k: s["status"] for k, s in entry["stages"].items()} == {
            stage: "identical" for stage in stages
        }
    assert report["first_divergence"] is None
    assert report["model"]["status"] == "identical"
    assert_no_workers_left(sc_d2.workdir)


# A replay from step N in this mode, restoring a two-worker kept checkpoint:
# tests/test_ray_scheduler.py (the same controller code under either scheduler).


def test_single_controller_recording_replays_in_spmd_mode(sc_d2):
    wd = sc_d2.workdir
    run = replay(wd, "spmd", SC_TRIAL, "sc_in_spmd", *TRAIN_D2, nproc=2)
    assert run.returncode == 0, run.log[-3000:]
    assert "Topology changed: recorded in single-controller mode" in run.log
    report = replay_report(str(wd), experiment=EXP, trial="sc_in_spmd")
    assert report["topology"]["changed"] is True
    assert report["topology"]["replay_mode"] == "spmd"
    assert_finite_replay(report)
    # Model digests are global (summed over the shards): the same model on any
    # layout, in either mode.
    assert report["model"]["status"] == "identical"


# On the worker that records spmd_d1, beside other scheduler runs: a seed of its own.
@pytest.mark.scheduler(seed=CROSS_MODE_SEED)
def test_spmd_recording_replays_in_single_controller_mode(workdir, spmd_d1):
    # The shared SPMD recording (fake engine, dropout model) replayed by the
    # shipped example as a single controller.
    run = replay(
        workdir,
        SC,
        "spmd",
        "spmd_in_sc",
        f"debug.path={spmd_d1.path}",
        f"actor.path={spmd_d1.workdir / 'model'}",
        f"seed={CROSS_MODE_SEED}",
        *spmd_d1.train_overrides,
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "Topology changed: recorded in spmd mode" in run.log
    report = replay_report(str(workdir), experiment=EXP, trial="spmd_in_sc")
    assert report["topology"]["changed"] is True
    assert report["topology"]["replay_mode"] == SC
    assert_finite_replay(report)
    assert_whole_batch_statistics_kept(report)
    assert_no_workers_left(workdir)


@pytest.mark.lifecycle
@pytest.mark.production_gc
def test_failing_replay_exits_nonzero_and_leaves_no_worker(sc_d2):
    # A changed learning rate diverges at step 0; fail_on_divergence stops the run.
    # On one worker (the recording's batches re-split): what must end is the same.
    run = replay(
        sc_d2.workdir,
        SC,
        SC_TRIAL,
        "sc_fail",
        "actor.optimizer.lr=2.0e-3",
        "debug.fail_on_divergence=true",
    )
    assert run.returncode != 0
    assert "Replay step 0 diverged from the recording" in run.log
    assert "debug.fail_on_divergence" in run.log
    assert_no_workers_left(sc_d2.workdir)


def interrupt(workdir, name, mode_overrides, server_addr, wait_for, send) -> int:
    """Start a single-controller run, signal it once ``wait_for`` is logged,
    and return its exit status (no worker may be left afterwards)."""
    cmd = example_command(SC, mode_overrides)
    env = example_env(workdir, SC, server_addr)
    proc = start_logged(cmd, str(workdir), name, env)
    log_path = os.path.join(workdir, f"{name}.log")
    try:
        wait_until(
            lambda: wait_for in Path(log_path).read_text(errors="replace"),
            300,
            f"the run never logged {wait_for!r}",
            interval=0.2,
            give_up=lambda: None
            if proc.poll() is None
            else "the run ended before it could be interrupted",
        )
        send(proc)
        rc = proc.wait(timeout=90)
        assert_no_workers_left(workdir)
        return rc
    finally:
        end_session(proc)


@pytest.mark.lifecycle
@pytest.mark.production_gc
def test_ctrl_c_to_the_controller_alone_during_a_dump_leaves_no_worker(
    sc_workdir, cpu_server
):
    # SIGINT reaches the controller only, never its workers: they end because
    # the controller ends them (interrupt() checks the process table).
    rc = interrupt(
        sc_workdir,
        "ctrl-c",
        # Enough steps that the run cannot end on its own before the signal.
        [
            "debug.dump_rollout_data=true",
            "total_train_epochs=50",
            "total_train_steps=400",
            "trial_name=ctrlc",
        ],
        cpu_server,
        "Train step 1/",
        lambda proc: proc.send_signal(signal.SIGINT),
    )
    assert rc != 0
    log = open(os.path.join(sc_workdir, "ctrl-c.log"), errors="replace").read()
    assert "KeyboardInterrupt" in log


@pytest.mark.lifecycle
@pytest.mark.production_gc
def test_sigterm_to_the_controller_leaves_no_worker(sc_d2):
    # A job system's kill reaches the controller alone; its worker must follow
    # (one: the two-worker recording re-split, as any worker count would do).
    rc = interrupt(
        sc_d2.workdir,
        "sigterm",
        [
            "debug.replay_rollout_data=true",
            f"total_train_steps={STEPS}",
            f"trial_name={SC_TRIAL}",
            "debug.replay_trial_name=sigterm",
        ],
        None,
        "Creating engines on workers",
        lambda proc: proc.send_signal(signal.SIGTERM),
    )
    assert rc == 128 + signal.SIGTERM


@pytest.mark.lifecycle
def test_dump_without_sglang_or_a_server_says_what_to_do(sc_workdir):
    # No AREAL_LLM_SERVER_ADDRS: AReaL would launch SGLang, which is not installed.
    run = run_example(
        sc_workdir,
        "no-server",
        SC,
        ["debug.dump_rollout_data=true", "total_train_steps=1", "trial_name=nosrv"],
    )
    assert run.returncode != 0
    assert "the sglang package is not installed" in run.log
    assert "AREAL_DEBUG_CPU_SERVER=1 and point AREAL_LLM_SERVER_ADDRS" in run.log
    assert_no_workers_left(sc_workdir)
