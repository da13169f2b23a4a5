# SPDX-License-Identifier: Apache-2.0
"""Dump then replay with AReaL's real PPOTrainer and FSDP engine under torchrun (SPMD).

The dump run's inference engine is the fake engine (SGLang cannot run here);
replay constructs no engine at all (the entry script fails if one is built).
"""

import math
import os
import shutil

import pytest
from support.harness import recording_dir, replay_report, run_torchrun

from areal_debug.stats_comparison import training_stats
from areal_debug.store_format import shard_payload_name, step_dirname

pytestmark = pytest.mark.areal

STEPS = 3
KEY_METRICS = [
    "ppo_actor/update/actor_loss/avg",
    "ppo_actor/update/actor_loss/min",
    "ppo_actor/update/actor_loss/max",
    "ppo_actor/update/grad_norm",
    "ppo_actor/update/importance_weight/avg",
]


def backends(dp: int) -> list[str]:
    return [f"actor.backend=fsdp:d{dp}", f"rollout.backend=sglang:d{dp}"]


def _assets(tmp_path_factory, tiny_assets, name):
    d = tmp_path_factory.mktemp(name)
    os.symlink(tiny_assets / "model", d / "model")
    os.symlink(tiny_assets / "data.jsonl", d / "data.jsonl")
    return d


def _dump(tmp_path_factory, tiny_assets, dp):
    d = _assets(tmp_path_factory, tiny_assets, f"dump_d{dp}")
    run = run_torchrun(
        str(d), "dump", dp, [*backends(dp), "debug.dump_rollout_data=true"]
    )
    assert run.returncode == 0, run.log[-3000:]
    assert len(run.stats) == STEPS
    return d, run


@pytest.fixture(scope="module")
def dump_d1(tmp_path_factory, tiny_assets):
    return _dump(tmp_path_factory, tiny_assets, 1)


@pytest.fixture(scope="module")
def dump_d2(tmp_path_factory, tiny_assets):
    return _dump(tmp_path_factory, tiny_assets, 2)


def replay(workdir, dp, *extra, name="replay"):
    return run_torchrun(
        str(workdir),
        name,
        dp,
        [*backends(dp), "debug.replay_rollout_data=true", *extra],
    )


def assert_bitwise(dump_run, replay_run):
    dumped, replayed = dump_run.stats_by_step(), replay_run.stats_by_step()
    assert sorted(replayed) == sorted(dumped) == list(range(STEPS))
    for step in range(STEPS):
        a, b = training_stats(dumped[step]), training_stats(replayed[step])
        assert set(KEY_METRICS) <= set(a)
        assert a.keys() == b.keys()
        different = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
        assert not different, f"step {step}: {different}"
        # A comparison of zero gradients would prove nothing.
        assert a["ppo_actor/update/grad_norm"] > 0


@pytest.mark.parametrize("dp", [1, 2])
def test_replay_is_bitwise_identical(request, dp):
    workdir, dump_run = request.getfixturevalue(f"dump_d{dp}")
    run = replay(workdir, dp)
    assert run.returncode == 0, run.log[-3000:]
    assert "Replay engine in place of the inference engine" in run.log
    assert_bitwise(dump_run, run)
    report = replay_report(str(workdir))
    assert report["summary"]["all_identical"] is True
    assert report["summary"]["steps"] == STEPS
    assert report["topology"] == {
        "recorded_mode": "spmd",
        "replay_mode": "spmd",
        "recorded_heads": dp,
        "replay_heads": dp,
        "recorded_train_dp": dp,
        "replay_train_dp": dp,
        "changed": False,
    }


def test_recording_holds_the_committed_statistics(dump_d1):
    workdir, dump_run = dump_d1
    from areal_debug.store_reader import RecordingReader

    reader = RecordingReader(recording_dir(str(workdir)))
    assert reader.available_steps() == list(range(STEPS))
    for step, stats in dump_run.stats_by_step().items():
        assert reader.recorded_stats(step) == training_stats(stats)
    layout = reader.manifest["layout"]
    assert layout["num_shards"] == 1 and layout["mode"] == "spmd"


def test_two_heads_record_one_shard_each(dump_d2):
    workdir, _ = dump_d2
    from areal_debug.store_reader import RecordingReader

    reader = RecordingReader(recording_dir(str(workdir)))
    meta = reader.step_meta(0)
    assert meta["num_shards"] == 2 and [s["shard"] for s in meta["shards"]] == [0, 1]
    # batch_size 8 prompts split over 2 heads' DistributedSampler shards.
    assert [s["num_trajectories"] for s in meta["shards"]] == [4, 4]


def test_debug_off_and_dump_train_exactly_like_ppo_trainer(dump_d1):
    workdir, dump_run = dump_d1
    # Own trials: AReaL's name_resolve entries must not collide with the dump's.
    plain = run_torchrun(
        str(workdir),
        "plain",
        1,
        [*backends(1), "trial_name=plain"],
        env={"AREAL_DEBUG_TEST_TRAINER": "plain"},
    )
    off = run_torchrun(str(workdir), "off", 1, [*backends(1), "trial_name=off"])
    assert plain.returncode == 0 and off.returncode == 0, off.log[-2000:]
    p, o, d = plain.stats_by_step(), off.stats_by_step(), dump_run.stats_by_step()
    for step in range(STEPS):
        assert training_stats(o[step]) == training_stats(p[step])
        # Recording does not perturb training either.
        assert training_stats(d[step]) == training_stats(p[step])


@pytest.mark.parametrize("recorded,replayed", [(2, 1), (1, 2)])
def test_cross_topology_replay_runs_and_says_so(request, recorded, replayed):
    workdir, _ = request.getfixturevalue(f"dump_d{recorded}")
    run = replay(workdir, replayed, "debug.replay_trial_name=cross", name="cross")
    assert run.returncode == 0, run.log[-3000:]
    assert "re-split" in run.log
    report = replay_report(str(workdir), trial="cross")
    assert report["topology"]["changed"] is True
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        # A re-split batch may clip differently, so a metric can exist on one
        # side only; every replayed value must still be finite.
        replayed = [m["replayed"] for m in entry["metrics"].values() if "replayed" in m]
        assert "ppo_actor/update/grad_norm" in entry["metrics"]
        assert replayed and all(math.isfinite(v) for v in replayed)


def test_replay_of_unrecorded_steps_fails_with_the_missing_range(dump_d1):
    workdir, _ = dump_d1
    run = replay(
        workdir,
        1,
        "total_train_steps=5",
        "debug.replay_trial_name=missing",
        name="missing",
    )
    assert run.returncode != 0
    assert "lacks steps 3-4" in run.log and "complete steps: 0-2" in run.log


def test_replay_of_a_corrupted_payload_names_the_file(dump_d1, tmp_path):
    workdir, _ = dump_d1
    copy = tmp_path / "rec"
    shutil.copytree(recording_dir(str(workdir)), copy)
    payload = copy / step_dirname(1) / shard_payload_name(0)
    data = bytearray(payload.read_bytes())
    data[-10] ^= 0x01
    payload.write_bytes(bytes(data))
    run = replay(
        workdir,
        1,
        f"debug.path={copy}",
        "debug.replay_trial_name=corrupt",
        name="corrupt",
    )
    assert run.returncode != 0
    assert "Checksum mismatch" in run.log and str(payload) in run.log
