# SPDX-License-Identifier: Apache-2.0
"""Retention: what a long dump run records, keeps and deletes (plan and writer)."""

import json
import os

import pytest
import torch

from areal_debug.recording.checkpoints import KEPT
from areal_debug.recording.format import step_dirname
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.retention import (
    DELETING_PREFIX,
    RetentionPolicy,
    parse_steps,
    plan,
)
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest


def test_step_specs_parse_and_bad_ones_say_how_to_write_them():
    assert parse_steps("0-9, 50,100-") == [(0, 9), (50, 50), (100, None)]
    assert parse_steps(None) is None and parse_steps("") is None
    with pytest.raises(ValueError, match="'x' is not a step or a range"):
        parse_steps("1,x")
    with pytest.raises(ValueError, match="bad range 5-2"):
        parse_steps("5-2")


def test_which_steps_are_recorded():
    p = RetentionPolicy(record_steps=parse_steps("0-3,10-"), record_every=2, pinned={5})
    assert [s for s in range(14) if p.records(s)] == [0, 2, 5, 10, 12]


def sizes(steps, each=10):
    return {s: each for s in steps}


def test_ring_buffer_keeps_the_newest_steps():
    p = RetentionPolicy(keep_last_steps=2)
    result = plan(p, sizes(range(6)), {})
    assert result.delete_steps == [0, 1, 2, 3]


def test_a_pinned_step_keeps_its_checkpoint_and_the_steps_after_it():
    # Checkpoints after steps 1 and 3: pinned step 3 replays from checkpoint 1
    # (the latest at or before step 2) through steps 2 and 3.
    p = RetentionPolicy(keep_last_steps=2, pinned={3})
    result = plan(p, sizes(range(8)), {1: 100, 3: 100, 5: 100})
    assert result.delete_steps == [0, 1, 4, 5]
    assert 1 not in result.delete_checkpoints
    # Checkpoint 5 restores the policy before step 6, the oldest step kept.
    assert result.delete_checkpoints == [3]
    assert result.kept_for_pins == [1, 2]


def test_a_disk_budget_deletes_oldest_unpinned_first_and_never_the_newest():
    p = RetentionPolicy(max_disk_bytes=35, pinned={1})
    result = plan(p, sizes(range(6)), {})
    # 60 bytes -> 30. With no checkpoint, pinned step 1 replays from step 0: both
    # stay, as does the newest (5); 2, 3 and 4 go.
    assert result.delete_steps == [2, 3, 4]
    assert result.kept_for_pins == [0]
    tiny = RetentionPolicy(max_disk_bytes=1)
    assert plan(tiny, sizes(range(3)), {}).delete_steps == [0, 1]


def test_nothing_is_deleted_without_a_limit():
    result = plan(RetentionPolicy(pinned={2}), sizes(range(5)), {0: 1, 2: 1})
    assert result.delete_steps == [] and result.delete_checkpoints == []


def new_recording(path: str) -> None:
    write_manifest(
        path,
        {
            "format_version": 2,
            "experiment_name": "e",
            "trial_name": "t",
            "layout": {"num_shards": 1, "steps_per_epoch": 10},
        },
    )


def batch(step):
    return [{"input_ids": torch.full((2, 4), step), "rewards": torch.zeros(2)}]


def test_the_writer_keeps_exactly_what_the_policy_says(tmp_path):
    path = str(tmp_path / "rec")
    new_recording(path)
    # Kept recover checkpoints as DumpMode leaves them, after steps 1 and 3.
    for c in (1, 3):
        os.makedirs(os.path.join(path, KEPT, step_dirname(c), "checkpoints"))
    # And one after step 0, which no kept step needs: it is deleted.
    os.makedirs(os.path.join(path, KEPT, step_dirname(0), "checkpoints"))
    policy = RetentionPolicy(keep_last_steps=2, pinned={3})
    w = RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=10, retention_policy=policy
    )
    for step in range(6):
        w.submit_batch(step, batch(step))
        w.submit_stats(step, {"loss": float(step)})
    w.close()
    reader = RecordingReader(path)
    # Ring buffer of 2 (4, 5) plus pinned 3 and what replaying it needs (2).
    assert reader.available_steps() == [2, 3, 4, 5]
    # Checkpoint 1 replays steps 2-3 (the pin), checkpoint 3 steps 4-5.
    assert sorted(os.listdir(os.path.join(path, KEPT))) == [
        step_dirname(1),
        step_dirname(3),
    ]
    assert not [n for n in os.listdir(path) if n.startswith(DELETING_PREFIX)]
    assert torch.equal(
        reader.load_shard(3, 0)[0]["input_ids"], batch(3)[0]["input_ids"]
    )


def test_anomaly_triggers_name_what_fired():
    from areal_debug.recording.anomaly import AnomalyDetector

    d = AnomalyDetector(10.0, ["ppo_actor/task_reward/avg < 0.05"])
    normal = {
        "ppo_actor/update/grad_norm": 1.0,
        "ppo_actor/update/actor_loss/avg": -0.02,
        "ppo_actor/task_reward/avg": 0.5,
    }
    # No median trigger before 5 steps of history, and none on normal steps.
    assert [d.check(normal) for _ in range(6)] == [[]] * 6
    (reason,) = d.check({**normal, "ppo_actor/update/grad_norm": 25.0})
    assert "grad_norm = 25 is above 10 x its running median 1" in reason
    (reason,) = d.check({**normal, "ppo_actor/update/actor_loss/avg": float("nan")})
    assert reason == "ppo_actor/update/actor_loss/avg is nan"
    (reason,) = d.check({**normal, "ppo_actor/task_reward/avg": 0.01})
    assert reason == "ppo_actor/task_reward/avg < 0.05 (it is 0.01)"
    # Statistics that are neither losses nor grad norms are never watched.
    assert d.check({**normal, "ppo_actor/update/actor_loss/max": float("inf")}) == []


def test_bad_thresholds_say_how_to_write_them():
    from areal_debug.config import DebugConfig

    with pytest.raises(ValueError, match="'reward low' is not 'METRIC OP NUMBER'"):
        DebugConfig(anomaly_thresholds=["reward low"])


def test_an_anomaly_pin_outlives_the_ring_buffer(tmp_path):
    """The pin is applied before the step's retention runs: its context survives."""
    import json

    path = str(tmp_path / "rec")
    new_recording(path)
    w = RecordingWriter(
        path,
        shard=0,
        num_shards=1,
        steps_per_epoch=10,
        # At least anomaly_context_steps + 1 (DebugConfig makes it so): the
        # context of an anomaly is still on disk when the anomaly shows.
        retention_policy=RetentionPolicy(keep_last_steps=3),
    )
    for step in range(8):
        w.submit_batch(step, batch(step))
        if step == 3:  # as DumpMode submits it: before the step's stats
            w.submit_pin(3, ["ppo_actor/update/grad_norm is nan"], [1, 2, 3])
        w.submit_stats(step, {"loss": float(step)})
    w.close()
    # Without a kept checkpoint, pinned steps replay from step 0: 0-3 stay; the
    # ring buffer keeps 5-7; only 4 goes.
    assert RecordingReader(path).available_steps() == [0, 1, 2, 3, 5, 6, 7]
    fired = json.loads(open(os.path.join(path, step_dirname(3), "anomaly.json")).read())
    assert fired["reasons"] == ["ppo_actor/update/grad_norm is nan"]
    assert fired["pinned"] == [1, 2, 3]


def test_kept_checkpoint_files_are_independent_of_the_in_place_rewrite(tmp_path):
    from areal_debug.recording.checkpoints import _reflink, _TreeCopy

    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"step 3 weights" * 1000)
    copy = _TreeCopy()
    copy.tree(str(src), str(tmp_path / "kept"))
    # AReaL's next save opens the same name for writing: the kept file stays.
    with open(src / "model.safetensors", "r+b") as f:
        f.write(b"step 4")
    assert (tmp_path / "kept" / "model.safetensors").read_bytes() == (
        b"step 3 weights" * 1000
    )
    reflinks = _reflink(str(src / "model.safetensors"), str(tmp_path / "probe"))
    assert (copy.reflinked, copy.copied) == ((1, 0) if reflinks else (0, 1))
    assert copy.describe().startswith(
        "0.0 MiB " + ("reflinked" if reflinks else "copied")
    )


@pytest.mark.areal
def test_a_long_run_keeps_its_budget_and_pinned_steps_replay_bitwise(
    tmp_path_factory, tiny_assets
):
    """A real dump (AReaL's trainer, fake engine) of 6 steps with a ring buffer of
    2, step 1 pinned by the user and step 3 by an injected anomaly (rewards shifted
    by -5, against a user threshold); then each pinned step replayed alone from the
    checkpoint retention kept for it."""
    from support.fake_engine import BAD_REWARD_STEP_ENV
    from support.harness import (
        assert_identical,
        recording_dir,
        replay_report,
        run_torchrun,
    )
    from support.recordings import _workdir

    from areal_debug.recording.checkpoints import kept_steps

    d = _workdir(tmp_path_factory, tiny_assets, "retention")
    dump = run_torchrun(
        str(d),
        "dump",
        1,
        [
            "total_train_steps=6",
            "debug.dump_rollout_data=true",
            "recover.mode=on",
            "++recover.freq_steps=1",
            "debug.keep_last_steps=2",
            "debug.pin_steps=[1]",
            "debug.anomaly_thresholds=['ppo_actor/task_reward/avg < -1']",
            "debug.anomaly_context_steps=0",
        ],
        env={BAD_REWARD_STEP_ENV: "3"},
    )
    assert dump.returncode == 0, dump.log[-3000:]
    assert "Anomaly at step 3: ppo_actor/task_reward/avg < -1" in dump.log
    path = recording_dir(str(d))
    # Pinned 1 and 3, the ring buffer's 4 and 5; 0 and 2 deleted.
    assert RecordingReader(path).available_steps() == [1, 3, 4, 5]
    kept = kept_steps(path)
    # Step 1 replays from checkpoint 0, step 3 from 2; checkpoint 1 served only
    # step 2, which is gone.
    assert {0, 2} <= set(kept) and 1 not in kept
    assert not [n for n in os.listdir(path) if n.startswith(DELETING_PREFIX)]

    # The anomaly-pinned step replays alone from its kept checkpoint (the one
    # before it, kept although the step between was deleted); a user's pin is
    # the same restore (tests/test_reproduce.py replays from kept checkpoints).
    recorded = dump.stats_by_step()
    for step in (3,):
        trial = f"from{step}"
        replay = run_torchrun(
            str(d),
            trial,
            1,
            [
                "debug.replay_rollout_data=true",
                f"debug.replay_trial_name={trial}",
                f"debug.replay_start_step={step}",
                f"total_train_steps={step + 1}",
            ],
        )
        assert replay.returncode == 0, replay.log[-3000:]
        assert f"recover checkpoint of step {step - 1} (kept" in replay.log
        report = replay_report(str(d), trial=trial)
        assert [e["global_step"] for e in report["steps"]] == [step]
        assert_identical(report)
        norm = report["steps"][0]["metrics"]["ppo_actor/update/grad_norm"]
        assert norm["replayed"] == recorded[step]["ppo_actor/update/grad_norm"] > 0


def test_one_step_grammar_for_the_config_and_every_command(tmp_path, capsys):
    """debug.record_steps and --steps read the same '0-9,50,100-' (issue 40)."""
    from test_cli_inspect import record_with_stats

    from areal_debug.cli import main
    from areal_debug.recording.format import StepRanges

    ranges = StepRanges.parse("0-2, 5,7-", "--steps ")
    assert [s for s in range(10) if s in ranges] == [0, 1, 2, 5, 7, 8, 9]
    assert parse_steps("0-2, 5,7-") == ranges.ranges
    rec = str(tmp_path / "rec")
    record_with_stats(rec, steps=4, anomaly_at=2, incomplete=4)
    assert main(["mismatch", rec, "--steps", "2-", "--json"]) == 4  # none measured
    rows = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in rows] == [2, 3]
    assert main(["mismatch", rec, "--steps", "2-x"]) == 1
    assert "--steps '2-x': '2-x' is not a step or a range" in capsys.readouterr().err
