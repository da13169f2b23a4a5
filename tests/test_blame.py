# SPDX-License-Identifier: Apache-2.0
"""Each sample's part in a step (``debug.blame_steps``, ``areal-debug blame``),
computed by AReaL's own train_batch in the real trainer: on ``spmd_d1`` (blamed at
step 0 in its dump: two mini-batches, attention dropout active) and its replay
(blamed at step 1), on ``sc_d2`` (single-controller, two workers, blamed at step 0
in its dump), and on a dump whose step has one NaN reward."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import math
import os

import pytest
from support.browser import missing_browser, open_page
from support.harness import recording_dir, replay_report, run_torchrun
from support.recordings import SC_EXPERIMENT, SC_TRIAL
from support.system_parts import missing_system_part
from support.workdirs import make_workdir

from areal_debug.cli import main as cli
from areal_debug.inspect.page import report as html_report
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages import sample_parts

pytestmark = [pytest.mark.areal]

# spmd_d1 (tests/support/recordings.py) blames these steps in its dump and in its
# shared replay.
DUMP_BLAMED, REPLAY_BLAMED = 0, 1
# The NaN run's planted sample: step 0, group 2's second sample.
NAN_STEP, NAN_GROUP, NAN_SAMPLE = 0, 2, 1


def blame_json(run_dir: str, step: int) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli(["blame", run_dir, "--step", str(step), "--json"])
    return rc, json.loads(out.getvalue())


def recording_of(workdir) -> str:
    return recording_dir(str(workdir), "tiny", "t0")


def run_log_dir(workdir, trial: str) -> str:
    (path,) = glob.glob(os.path.join(str(workdir), "root", "logs", "*", "tiny", trial))
    return path


def assert_parts_add_up(data: dict, stats: dict, reader: RecordingReader, step: int):
    """The samples' parts are the step's own update, to float tolerance: every
    recorded sample once; per mini-batch the samples' losses add up to the whole
    mini-batch's; the mini-batches' gradient norms and losses are AReaL's own
    statistics of the step; the grad shares (projections on the mini-batch's
    gradient) add up to 1, so the samples' gradients sum to the mini-batch's."""
    samples = data["samples"]
    batch = reader.load_batch(step)
    recorded = sorted(
        (g, r)
        for g, traj in enumerate(batch)
        for r in range(traj["input_ids"].shape[0])
    )
    assert sorted((s["group"], s["sample"]) for s in samples) == recorded
    assert data["unpaired"] == []
    assert data["finite"] is True and data["origin"] is None
    assert data["loss_share_sum"] == pytest.approx(1.0, abs=1e-9)
    assert data["grad_share_sum"] == pytest.approx(1.0, abs=1e-5)
    mbs = data["mini_batches"]
    for m in mbs:
        own = [s["loss"] for s in samples if s["mini_batch"] == m["mini_batch"]]
        assert sum(own) == pytest.approx(m["loss"], rel=1e-5, abs=1e-7)
    # AReaL averages its per-mini-batch grad_norm over the step; its actor_loss
    # average is over every loss token (each mini-batch's loss is a token mean).
    norms = [m["grad_norm"] for m in mbs]
    assert sum(norms) / len(norms) == pytest.approx(
        stats["ppo_actor/update/grad_norm"], rel=1e-5
    )
    weighted = sum(m["loss"] * m["loss_weight"] for m in mbs)
    assert weighted / sum(m["loss_weight"] for m in mbs) == pytest.approx(
        stats["ppo_actor/update/actor_loss/avg"], abs=1e-6
    )
    # Ranked by |grad_share|; a share can be negative (it pulls against it).
    shares = [abs(s["grad_share"]) for s in samples]
    assert shares == sorted(shares, reverse=True)
    # A sample's gradient is 0 only where PPO clipped each of its tokens (the
    # single-controller demo's step 0 has one: 1 loss token, clipped).
    assert all(s["tokens"] > 0 for s in samples)
    assert all(s["grad_norm"] > 0 or s["clipped"] == s["tokens"] for s in samples)


@pytest.mark.each_areal
def test_a_dumps_blamed_step_parts_add_up_to_its_own_update(spmd_d1):
    run_dir = run_log_dir(spmd_d1.workdir, "t0")
    rc, data = blame_json(run_dir, DUMP_BLAMED)
    assert rc == 0
    assert len(data["mini_batches"]) == 2  # the test YAML's two mini-batches
    stats = spmd_d1.run.stats_by_step()[DUMP_BLAMED]
    assert_parts_add_up(data, stats, RecordingReader(spmd_d1.path), DUMP_BLAMED)
    # Only the steps asked for.
    assert os.listdir(os.path.join(run_dir, "blame")) == ["step-000000.json"]


@pytest.mark.each_areal
def test_a_replays_blamed_step_parts_add_up_and_the_replay_stays_bitwise(
    spmd_d1, spmd_d1_replay
):
    """The dump blamed step 0 and the replay step 1, both with dropout active:
    the replay is bit for bit at every step (the blame passes leave the
    parameters, the optimizer, the RNG and AReaL's statistics as they were)."""
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    report = replay_report(str(spmd_d1.workdir))
    assert report["summary"]["all_identical"] is True, report["headline"]
    run_dir = run_log_dir(spmd_d1.workdir, "t0_replay")
    rc, data = blame_json(run_dir, REPLAY_BLAMED)
    assert rc == 0
    stats = spmd_d1_replay.stats_by_step()[REPLAY_BLAMED]
    assert_parts_add_up(data, stats, RecordingReader(spmd_d1.path), REPLAY_BLAMED)


@pytest.mark.scheduler
def test_single_controller_parts_at_two_workers_add_up(sc_d2):
    """In single-controller mode the passes run in the RPC workers, around the
    probed engine's train_batch, at two data-parallel ranks: each pass carries
    one rank's sample with the other rank's masks all cleared. The parts add up
    as in SPMD (every recorded sample once, paired by its tokens though the
    controller redistributes the rows), and the demo's replay, not blamed, is bit
    for bit (tests/test_demo.py): the blamed step trained as it would have."""
    pattern = os.path.join(str(sc_d2.workdir), "root", "logs", "*", SC_EXPERIMENT)
    (run_dir,) = glob.glob(os.path.join(pattern, SC_TRIAL))
    rc, data = blame_json(run_dir, 0)
    assert rc == 0
    reader = RecordingReader(sc_d2.path)
    assert_parts_add_up(data, reader.recorded_stats(0), reader, 0)
    assert {s["rank"] for s in data["samples"]} == {0, 1}


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory, tiny_assets):
    """One step whose group NAN_GROUP has one NaN reward, blamed in its dump."""
    # Here, not at the top: the fake engine imports AReaL, which would rebind the
    # loggers of the CLI commands the other tests of this worker run.
    from support.fake_engine import NAN_REWARD_ENV

    d = make_workdir(tmp_path_factory.mktemp("nan_reward"), tiny_assets)
    run = run_torchrun(
        str(d),
        "dump",
        1,
        [
            "total_train_steps=1",
            "debug.dump_rollout_data=true",
            f"debug.blame_steps={NAN_STEP}",
        ],
        env={NAN_REWARD_ENV: f"{NAN_STEP}:{NAN_GROUP}/{NAN_SAMPLE}"},
    )
    assert run.returncode == 0, run.log[-3000:]
    return d, run


def test_a_nan_reward_is_traced_to_its_sample(nan_run, capsys, tmp_path):
    """The NaN reward makes its group's normalised rewards NaN, the batch's
    advantages with them (normalised over the batch), and the step's loss and
    gradient; the origin is the one sample whose reward is NaN, through its
    reward, not its group or the batch."""
    d, run = nan_run
    stats = run.stats_by_step()[NAN_STEP]
    assert not math.isfinite(stats["ppo_actor/update/actor_loss/avg"])
    run_dir = run_log_dir(d, "t0")
    rc, data = blame_json(run_dir, NAN_STEP)
    assert rc == 0
    assert data["finite"] is False
    origin = data["origin"]
    assert (origin["group"], origin["sample"], origin["entered"]) == (
        NAN_GROUP,
        NAN_SAMPLE,
        "reward",
    )
    # The test YAML normalises rewards in each group, then advantages over the
    # batch (AReaL's GRPO default): every sample's advantage is NaN, and only the
    # one reward says where it came from.
    assert all(s["advantage_finite"] is False for s in data["samples"])
    nan_rewards = [
        (s["group"], s["sample"]) for s in data["samples"] if not s["reward_finite"]
    ]
    assert nan_rewards == [(NAN_GROUP, NAN_SAMPLE)]
    # Each sample and the origin carry their link in the report page.
    assert origin["link"] == f"#step={NAN_STEP}&group={NAN_GROUP}&sample={NAN_SAMPLE}"
    assert all(
        s["link"] == f"#step={NAN_STEP}&group={s['group']}&sample={s['sample']}"
        for s in data["samples"]
    )
    # The page of the dump's recording and its log folder opens on the origin.
    out = tmp_path / "nan.html"
    html_report.build_report(recording_of(d), run_dir, str(out))
    if (why := missing_browser()) is not None:
        missing_system_part(why)
    with open_page(str(out)) as page:
        assert page.errors == []
        assert f"group {NAN_GROUP}" in page.inner_text("#blame-origin")
        # Opened with no link: on the origin's tokens.
        assert (
            f"Step {NAN_STEP}, group {NAN_GROUP}, sample {NAN_SAMPLE}"
            in page.inner_text("#traj")
        )
    # The view says it in one line, with the sample's text.
    assert cli(["blame", run_dir, "--step", str(NAN_STEP)]) == 0
    out = capsys.readouterr().out
    assert (
        f"Not finite: it entered at group {NAN_GROUP} sample {NAN_SAMPLE}'s reward"
        in out
    )
    assert f"page.html{origin['link']} opens the origin" in out


def test_blame_without_parts_says_how_to_compute_them(tmp_path, capsys):
    (tmp_path / "blame").mkdir()
    (tmp_path / "blame" / "step-000003.json").write_text("{}")
    assert cli(["blame", str(tmp_path), "--step", "5"]) == 2
    err = capsys.readouterr().err
    assert "No sample parts of step 5" in err
    assert "(it has step-000003.json)" in err
    assert "debug.blame_steps=5" in err


def test_the_origin_is_looked_for_in_the_steps_order():
    """Reward before advantage before log-probs before loss and gradient, each
    over every sample in the one numbering: a group's NaN advantages (made by one
    NaN reward) never hide the reward."""
    samples = [
        {"key": "a", "group": 0, "sample": 0, "advantage_finite": False, "loss": 1.0},
        {"key": "b", "group": 1, "sample": 0, "reward_finite": True, "loss": math.nan},
        {"key": "c", "group": 1, "sample": 2, "reward_finite": False, "loss": 0.2},
    ]
    for s in samples:
        s["grad_norm"] = 1.0
    assert sample_parts.origin(samples)["key"] == "c"
    samples[2]["reward_finite"] = True
    found = sample_parts.origin(samples)
    assert (found["key"], found["entered"]) == ("a", "advantage")
    samples[0]["advantage_finite"] = True
    assert sample_parts.origin(samples)["entered"] == "loss"
    samples[1]["loss"] = 0.5
    assert sample_parts.origin(samples) is None


def test_the_step_without_the_nan_rewards_group_is_finite(nan_run):
    """debug.drop_samples: the step replayed without the origin's group (its
    rewards are normalised in groups, so the group goes whole), the rest of the
    batch as recorded: its loss and gradient are finite again, the story names
    what was dropped, and the blamed step's parts add up."""
    d, _ = nan_run
    dropped = f"{NAN_STEP}:{NAN_GROUP}/*"
    run = run_torchrun(
        str(d),
        "dropped",
        1,
        [
            "total_train_steps=1",
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=dropped",
            f"debug.drop_samples={dropped}",
            f"debug.blame_steps={NAN_STEP}",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    stats = run.stats_by_step()[NAN_STEP]
    assert math.isfinite(stats["ppo_actor/update/actor_loss/avg"])
    assert math.isfinite(stats["ppo_actor/update/grad_norm"])
    report = replay_report(str(d), trial="dropped")
    (change,) = [
        c for c in report["config_changes"] if c["key"] == "debug.drop_samples"
    ]
    assert (change["recorded"], change["replay"]) == ("", dropped)
    assert "debug.drop_samples" in report["headline"]
    # The asked-for divergence is said, not warned.
    assert "WARNING" not in "".join(
        line for line in run.log.splitlines() if "diverged from the recording" in line
    )
    rc, data = blame_json(run_log_dir(d, "dropped"), NAN_STEP)
    assert rc == 0 and data["finite"] is True
    assert {s["group"] for s in data["samples"]} == set(range(8)) - {NAN_GROUP}
    assert data["grad_share_sum"] == pytest.approx(1.0, abs=1e-5)
