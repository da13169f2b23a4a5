# SPDX-License-Identifier: Apache-2.0
"""Dump then replay with AReaL's real PPOTrainer and FSDP engine under torchrun (SPMD).

The dump run's inference engine is the fake engine (SGLang cannot run here);
replay constructs no engine at all (the entry script fails if one is built).
The recordings (``spmd_d1``, ``spmd_d2``) are made once per test run.
"""

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
from support.harness import (
    assert_identical,
    assert_whole_batch_statistics_kept,
    replay_report,
    run_torchrun,
)
from support.recordings import (
    ANOMALY_THRESHOLD,
    DROPOUT,
    SPMD_D1_STEPS,
    SPMD_D2_FAILED_STEP,
    SPMD_D2_STEPS,
)

from areal_debug.compare.statistics import OWN_PREFIX, training_stats
from areal_debug.recording.format import LOCK_FILE, shard_payload_name, step_dirname
from areal_debug.recording.reader import RecordingReader

pytestmark = [pytest.mark.areal, pytest.mark.spmd_recordings]

KEY_METRICS = [
    "ppo_actor/update/actor_loss/avg",
    "ppo_actor/update/actor_loss/min",
    "ppo_actor/update/actor_loss/max",
    "ppo_actor/update/grad_norm",
    "ppo_actor/update/importance_weight/avg",
]


def backends(dp: int) -> list[str]:
    return [f"actor.backend=fsdp:d{dp}", f"rollout.backend=sglang:d{dp}"]


def replay(recorded, dp, *extra, name="replay"):
    return run_torchrun(
        str(recorded.workdir),
        name,
        dp,
        [
            *backends(dp),
            *recorded.train_overrides,
            "debug.replay_rollout_data=true",
            *extra,
        ],
    )


def assert_bitwise(dump_run, replay_run, steps):
    dumped, replayed = dump_run.stats_by_step(), replay_run.stats_by_step()
    assert sorted(replayed) == sorted(dumped)[:steps] == list(range(steps))
    for step in range(steps):
        a, b = training_stats(dumped[step]), training_stats(replayed[step])
        assert set(KEY_METRICS) <= set(a)
        assert a.keys() == b.keys()
        different = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
        assert not different, f"step {step}: {different}"
        # A comparison of zero gradients would prove nothing.
        assert a["ppo_actor/update/grad_norm"] > 0


def expected_topology(dp: int) -> dict:
    return {
        "recorded_mode": "spmd",
        "replay_mode": "spmd",
        "recorded_heads": dp,
        "replay_heads": dp,
        "recorded_train_dp": dp,
        "replay_train_dp": dp,
        "changed": False,
    }


@pytest.mark.each_areal
def test_replay_is_bitwise_identical_at_one_process(spmd_d1, spmd_d1_replay):
    run = spmd_d1_replay
    assert run.returncode == 0, run.log[-3000:]
    assert "Replay engine in place of the inference engine" in run.log
    assert_bitwise(spmd_d1.run, run, SPMD_D1_STEPS)
    report = replay_report(str(spmd_d1.workdir))
    assert_identical(report)
    assert report["summary"]["steps"] == SPMD_D1_STEPS
    assert report["topology"] == expected_topology(1)


@pytest.mark.each_areal
def test_replay_is_bitwise_identical_at_two_processes(spmd_d2):
    # The dump ran through the launcher with debug.deterministic=true (the test
    # YAML); a bare torchrun replay lacks the launcher's environment (cuBLAS,
    # NCCL), which no CPU kernel reads: no warning, and bitwise.
    run = replay(
        spmd_d2,
        2,
        "debug.replay_trial_name=d2",
        f"total_train_steps={SPMD_D2_STEPS}",
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "Replay engine in place of the inference engine" in run.log
    assert "Determinism settings differ" not in run.log
    assert_bitwise(spmd_d2.run, run, SPMD_D2_STEPS)
    report = replay_report(str(spmd_d2.workdir), trial="d2")
    assert_identical(report)
    assert report["summary"]["steps"] == SPMD_D2_STEPS
    assert report["topology"] == expected_topology(2)
    # Each rank digested its FSDP shard of every gradient and weight; the
    # summed digests match the dump run's, and each rank's own stages do.
    for entry in report["steps"]:
        assert {s["status"] for s in entry["stages"].values()} == {"identical"}
    recorded, _ = RecordingReader(spmd_d2.path).recorded_stages(0)
    assert len(recorded["ranks"]) == 2
    assert len(recorded["global"]["weights"]) == entry["stages"]["weights"]["compared"]


def test_recording_holds_the_committed_statistics(spmd_d1):
    from areal_debug.recording.reader import RecordingReader

    reader = RecordingReader(spmd_d1.path)
    assert reader.available_steps() == list(range(SPMD_D1_STEPS))
    for step, stats in spmd_d1.run.stats_by_step().items():
        assert reader.recorded_stats(step) == training_stats(stats)
    layout = reader.manifest.layout
    assert layout.num_shards == 1 and layout.mode == "spmd"
    # The run took the recording's lock, and its end released it.
    assert os.path.exists(os.path.join(spmd_d1.path, LOCK_FILE))
    assert reader.writer() is None


def test_two_heads_record_one_shard_each(spmd_d2):
    from areal_debug.recording.reader import RecordingReader

    reader = RecordingReader(spmd_d2.path)
    meta = reader.step_meta(0)
    assert meta.num_shards == 2 and [s.shard for s in meta.shards] == [0, 1]
    # batch_size 8 prompts split over 2 heads' DistributedSampler shards.
    assert [s.num_trajectories for s in meta.shards] == [4, 4]


@pytest.mark.each_areal
def test_a_request_failed_on_the_second_head_pins_its_step(spmd_d2):
    """The second data-parallel head's engine failed one request while step
    SPMD_D2_FAILED_STEP's batch was prepared (AReaL main's refusal of a
    non-finite log-prob takes that path): the coordinator, whose own engine saw
    nothing, pins that step with the head's reason; no other step is pinned."""
    from support.fake_engine import FAILED_REQUEST_ERROR

    step = SPMD_D2_FAILED_STEP
    for other in set(range(SPMD_D2_STEPS)) - {step}:
        assert not os.path.exists(
            os.path.join(spmd_d2.path, step_dirname(other), "anomaly.json")
        )
    with open(os.path.join(spmd_d2.path, step_dirname(step), "anomaly.json")) as f:
        fired = json.load(f)
    (reason,) = fired["reasons"]
    assert reason == (
        "rank 1: 1 rollout request(s) failed in the inference engine and their "
        f"rollouts were rejected; the first: ValueError: {FAILED_REQUEST_ERROR}"
    )
    assert fired["pinned"] == list(range(step - 2, step + 1))
    assert f"Anomaly at step {step}: rank 1: 1 rollout request(s)" in spmd_d2.run.log
    # The failed rollout was replaced: the step's batch is whole on both heads.
    meta = RecordingReader(spmd_d2.path).step_meta(step)
    assert [s.num_trajectories for s in meta.shards] == [4, 4]


def test_an_anomaly_trigger_pins_the_step_in_a_real_run(spmd_d1):
    """spmd_d1 records with a threshold that fires at every step."""
    assert f"Anomaly at step 0: {ANOMALY_THRESHOLD} (it is" in spmd_d1.run.log
    for step in range(SPMD_D1_STEPS):
        with open(os.path.join(spmd_d1.path, step_dirname(step), "anomaly.json")) as f:
            fired = json.load(f)
        assert fired["global_step"] == step
        (reason,) = fired["reasons"]
        assert reason.startswith(f"{ANOMALY_THRESHOLD} (it is ")
        assert fired["pinned"] == list(range(max(0, step - 2), step + 1))


def test_debug_off_and_dump_train_exactly_like_ppo_trainer(spmd_d1):
    steps = 3
    # The dump run's settings; own trials, so that AReaL's name_resolve entries
    # do not collide with the dump's.
    same = [
        *backends(1),
        *DROPOUT,
        f"total_train_steps={steps}",
        "recover.mode=on",
        "++recover.freq_steps=1",
    ]
    workdir = str(spmd_d1.workdir)
    plain = run_torchrun(
        workdir,
        "plain",
        1,
        [*same, "trial_name=plain"],
        env={"AREAL_DEBUG_TEST_TRAINER": "plain"},
    )
    off = run_torchrun(workdir, "off", 1, [*same, "trial_name=off"])
    assert plain.returncode == 0 and off.returncode == 0, off.log[-2000:]
    p, o, d = plain.stats_by_step(), off.stats_by_step(), spmd_d1.run.stats_by_step()
    for step in range(steps):
        assert training_stats(o[step]) == training_stats(p[step])
        # Recording does not perturb training either: AReaL's statistics are the
        # plain trainer's; areal-debug adds its own (the mismatch) and no other.
        dumped = training_stats(d[step])
        ours = {k for k in dumped if k.startswith(OWN_PREFIX)}
        assert ours and set(dumped) - ours == set(training_stats(p[step]))
        assert {k: v for k, v in dumped.items() if k not in ours} == training_stats(
            p[step]
        )


def test_cross_topology_replay_keeps_each_steps_batch(spmd_d2):
    # Two shards replayed at one process. One shard at two processes: the
    # shipped example's replays at a given allocation in tests/test_launcher.py.
    rec = spmd_d2
    run = replay(
        rec,
        1,
        "total_train_steps=3",
        "debug.replay_trial_name=cross",
        name="cross",
    )
    assert run.returncode == 0, run.log[-3000:]
    assert "re-split" in run.log
    report = replay_report(str(rec.workdir), trial="cross")
    assert report["topology"]["changed"] is True
    assert report["summary"]["steps"] == 3
    for entry in report["steps"]:
        # A re-split batch may clip differently, so a metric can exist on one
        # side only; every replayed value must still be finite.
        replayed_values = [
            m["replayed"] for m in entry["metrics"].values() if "replayed" in m
        ]
        assert "ppo_actor/update/grad_norm" in entry["metrics"]
        assert replayed_values and all(math.isfinite(v) for v in replayed_values)
    # The same trajectories were trained on, in whatever split.
    assert_whole_batch_statistics_kept(report)


def test_replay_of_a_corrupted_payload_names_the_file(spmd_d1, tmp_path):
    copy = tmp_path / "rec"
    shutil.copytree(spmd_d1.path, copy)
    payload = copy / step_dirname(1) / shard_payload_name(0, "zstd")
    data = bytearray(payload.read_bytes())
    data[-10] ^= 0x01
    payload.write_bytes(bytes(data))
    run = replay(
        spmd_d1,
        1,
        "total_train_steps=3",
        f"debug.path={copy}",
        "debug.replay_trial_name=corrupt",
        name="corrupt",
    )
    assert run.returncode != 0
    assert "Checksum mismatch" in run.log and str(payload) in run.log


def relabelled_areal(root, version: str) -> str:
    """A directory that, first on PYTHONPATH, makes the installed AReaL's
    distribution metadata say ``version``: importlib.metadata finds this
    ``areal-<version>.dist-info`` before site-packages' (the code is unchanged)."""
    meta = os.path.join(str(root), f"areal-{version}", f"areal-{version}.dist-info")
    os.makedirs(meta, exist_ok=True)
    with open(os.path.join(meta, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: areal\nVersion: {version}\n")
    return os.path.dirname(meta)


@pytest.mark.each_areal
def test_an_untested_areal_release_replays_with_one_warning(spmd_d1, tmp_path):
    """The installed AReaL relabelled 2.1.0 (the release after main @cbff54d; no
    snapshot of its code is available) replays the recording bit for bit, with one
    warning naming the tested builds; relabelled 3.0.0, the check passes too."""
    meta = relabelled_areal(tmp_path, "2.1.0")
    env = {"PYTHONPATH": os.pathsep.join([meta, os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlib.metadata import version; print(version('areal'))",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "2.1.0"
    run = run_torchrun(
        str(spmd_d1.workdir),
        "relabelled-2.1.0",
        1,
        [
            *DROPOUT,
            f"total_train_steps={SPMD_D1_STEPS}",
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=relabelled",
        ],
        env=env,
    )
    assert run.returncode == 0, run.log[-3000:]
    warned = "AReaL 2.1.0 is not a release areal-debug was tested with"
    assert run.log.count(warned) == 1, run.log[-3000:]
    assert_bitwise(spmd_d1.run, run, SPMD_D1_STEPS)
    assert_identical(replay_report(str(spmd_d1.workdir), trial="relabelled"))
    meta = relabelled_areal(tmp_path, "3.0.0")
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "from areal_debug.areal_compat import "
            "TRAINER_HOOKS, LAUNCHER_HOOKS, check_areal_version as c; "
            "print(c(hooks=TRAINER_HOOKS + LAUNCHER_HOOKS))",
        ],
        env={**os.environ, "PYTHONPATH": meta},
        capture_output=True,
        text=True,
    )
    # AReaL's loggers (ours through them) write to stdout: the result is its last line.
    assert check.returncode == 0, check.stderr[-2000:]
    assert check.stdout.splitlines()[-1] == "3.0.0"
    assert "AReaL 3.0.0 is not a release areal-debug was tested with" in check.stdout
