# SPDX-License-Identifier: Apache-2.0
"""A replay's story: the training settings changed from the recording's (at its
start) and one headline at its end, also in replay_report.json and `diff`."""

from __future__ import annotations

import math

from areal_debug.compare.config_changes import story_start, training_changes
from areal_debug.compare.report import ReplayReport, StepComparison, TopologyChange
from areal_debug.inspect.diff import render as render_diff
from areal_debug.inspect.diff.two_runs import Source, diff_runs

RECORDED = {
    "seed": 1,
    "actor": {"optimizer": {"lr": 1e-3}, "backend": "fsdp:d1", "path": "/m"},
    "gconfig": {"n_samples": 4},
    "trial_name": "t0",
    "debug": {"replay_rollout_data": False},
}


def replayed(**changes):
    current = {
        **RECORDED,
        "actor": {**RECORDED["actor"], "optimizer": {"lr": changes.get("lr", 1e-3)}},
        "trial_name": "t0_replay",
        "debug": {"replay_rollout_data": True},
    }
    return current


def test_only_training_settings_count_as_changes():
    assert training_changes(RECORDED, replayed()) == []
    (change,) = training_changes(RECORDED, replayed(lr=1e-5))
    assert (change.key, change.recorded, change.current) == (
        "actor.optimizer.lr",
        1e-3,
        1e-5,
    )
    assert story_start([change]) == (
        "Replay: you changed 1 training setting(s) from the recording: "
        "actor.optimizer.lr 0.001 -> 1e-05. The replay leaves the recording where "
        "they first take effect."
    )
    assert story_start([]).startswith(
        "Replay: the training settings are the recording's"
    )
    # A key one side lacks is a change too.
    (absent,) = training_changes(RECORDED, {**replayed(), "ref": {"path": "/r"}})
    assert (absent.key, absent.recorded) == ("ref.path", "<absent>")


def test_the_numerics_knobs_of_the_training_forward_are_named_when_changed():
    """AReaL main's actor.logprobs_chunk_size (#1555) and the attention backend
    change how log-probs are computed: a replay that changes them says so."""
    recorded = {**RECORDED, "actor": {**RECORDED["actor"], "logprobs_chunk_size": 1024}}
    current = {
        **replayed(),
        "actor": {
            **replayed()["actor"],
            "logprobs_chunk_size": 256,
            "attn_impl": "sdpa",
        },
    }
    changes = {
        c.key: (c.recorded, c.current) for c in training_changes(recorded, current)
    }
    assert changes == {
        "actor.logprobs_chunk_size": (1024, 256),
        "actor.attn_impl": ("<absent>", "sdpa"),
    }


def test_the_settings_after_cbff54d_are_named_and_those_of_the_batch_said_idle():
    """AReaL after cbff54d (areal/trainer/rl_trainer.py after #1563 and the
    process-reward shaping in its compute_advantages call; areal/api/cli_args.py's
    gconfig): min_usable_group_size and reward_normalization_use_std are
    prepare_batch arguments, so a replay, which trains the recorded batch, says a
    change of them does nothing; the advantage shaping acts in the trainer."""
    recorded = {
        **RECORDED,
        "gconfig": {"n_samples": 4, "reward_normalization_use_std": True},
        "actor": {**RECORDED["actor"], "min_usable_group_size": None},
        "rollout": {"agent": {"prm": {"advantage_shaping": {"mode": "additive"}}}},
    }
    current = {
        **replayed(),
        "gconfig": {"n_samples": 4, "reward_normalization_use_std": False},
        "actor": {**replayed()["actor"], "min_usable_group_size": 2},
        "rollout": {"agent": {"prm": {"advantage_shaping": {"mode": "gvpo"}}}},
    }
    changes = training_changes(recorded, current)
    assert {c.key: c.rollout_side for c in changes} == {
        "actor.min_usable_group_size": True,
        "gconfig.reward_normalization_use_std": True,
        "rollout.agent.prm.advantage_shaping.mode": False,
    }
    story = story_start(changes)
    assert "rollout.agent.prm.advantage_shaping.mode 'additive' -> 'gvpo'" in story
    assert story.endswith(
        " actor.min_usable_group_size, gconfig.reward_normalization_use_std act "
        "where the batch is made (prepare_batch): the replay trains the recorded "
        "batch, made with the recording's value, so this change does nothing here; "
        "record with it to see its effect."
    )


def report(statuses, changes=(), stage=None):
    steps = []
    for step, status in enumerate(statuses):
        entry = StepComparison(global_step=step, status=status, metrics={})
        if stage and status == "diverged":
            entry.stages = {stage["stage"]: {"status": "differs", **stage}}
        steps.append(entry)
    topology = TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    out = ReplayReport("/rec", 1e-5, 1e-8, topology, steps)
    out.config_changes = list(changes)
    return out


def test_the_headline_says_how_it_went_and_what_was_changed():
    assert report(["identical"] * 3).headline() == (
        "identical to the recording at every step (3)"
    )
    lr = {"key": "actor.optimizer.lr", "recorded": 1e-3, "replay": 1e-5}
    diverged = report(
        ["identical", "diverged"],
        [lr],
        {"stage": "weights", "where": "mini-batch 0 lm_head.weight"},
    )
    assert diverged.headline() == (
        "left the recording at step 1: weights (mini-batch 0 lm_head.weight); "
        "you changed actor.optimizer.lr"
    )
    data = diverged.to_json()
    assert data["headline"] == diverged.headline()
    assert data["config_changes"] == [lr]
    assert ReplayReport.from_json(data).headline() == diverged.headline()


def test_diff_of_a_replay_report_tells_the_story():
    data = report(["identical"] * 2).to_json()
    data["steps"][0]["metrics"] = {"loss": {"recorded": 1.0, "replayed": 1.0}}
    recorded = Source("/rec", "recording", "recorded", {0: {"loss": 1.0}})
    replay = Source(
        "/r.json",
        "report",
        "replay x",
        {0: {"loss": 1.0}},
        ReplayReport.from_json(data),
    )
    d = diff_runs(recorded, replay)
    assert d.story == "identical to the recording at every step (2)"
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_diff.run_diff(d, False, None))
    assert "Replay story: identical to the recording at every step (2)" in (
        console.export_text()
    )


def test_ls_leads_with_the_story_not_the_noisiest_metric():
    """``ls`` said "diverged at step 1 (the metric with the largest relative
    difference)", a noise metric more often than not; it now says the story."""
    from areal_debug.inspect.listing import _replay_summary

    lr = {"key": "actor.optimizer.lr", "recorded": 1e-3, "replay": 1e-5}
    diverged = report(
        ["identical", "diverged"],
        [lr],
        {"stage": "weights", "where": "mini-batch 0 lm_head.weight"},
    )
    data = diverged.to_json()
    data["steps"][1]["metrics"] = {
        "ppo_actor/compute_logp/kl_div_taylor/max": {
            "recorded": 1.0,
            "replayed": 3.0,
            "rel_diff": 2.0,
            "status": "diverged",
        }
    }
    summary = _replay_summary(
        "/logs/u/e/lr/replay_report.json", ReplayReport.from_json(data)
    )
    assert summary.verdict == (
        "left the recording at step 1: weights (mini-batch 0 lm_head.weight); "
        "you changed actor.optimizer.lr"
    )
    assert "kl_div_taylor" not in summary.verdict


def test_every_command_reads_a_report_through_the_one_type(tmp_path, capsys):
    """diff, ls, mismatch and report read a replay report through
    compare/report.py's read_report: one malformed in a key it needs is named
    once, the same way, by each."""
    import json

    from test_cli_inspect import record_with_stats

    from areal_debug.cli import main

    rec = str(tmp_path / "rec")
    record_with_stats(rec, steps=2, anomaly_at=-1, incomplete=2)
    data = report(["identical"] * 2).to_json()
    del data["topology"]
    path = tmp_path / "replay_report.json"
    path.write_text(json.dumps(data))
    page = str(tmp_path / "page.html")
    for argv in (
        ["diff", str(path)],
        ["mismatch", rec, str(path)],
        ["report", rec, str(path), "-o", page],
    ):
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert "is a replay report this areal-debug cannot read" in err, (argv, err)
        assert "'topology'" in err


def test_another_areal_builds_settings_and_statistics_are_not_called_changes():
    """Measured on the demo recorded under AReaL main and replayed under 1.0.4
    (docs/upgrades.md): every stage and every statistic both log bit for bit, but
    main's config has keys 1.0.4's lacks and main logs statistics 1.0.4 does not.
    Those are one side's, not a change of the user's, and not a difference."""
    recorded = {**RECORDED, "actor": {**RECORDED["actor"], "logprobs_chunk_size": 1024}}
    changes = training_changes(recorded, replayed())
    assert [(c.key, c.one_sided) for c in changes] == [
        ("actor.logprobs_chunk_size", True)
    ]
    story = story_start(changes)
    assert "you changed" not in story
    assert (
        "1 setting(s) only one side's AReaL (or config class) has: "
        "actor.logprobs_chunk_size 1024 in the recording." in story
    )
    # Beside a change of the user's, each is named for what it is.
    both = story_start(training_changes(recorded, replayed(lr=1e-5)))
    assert both.startswith(
        "Replay: you changed 1 training setting(s) from the recording: "
        "actor.optimizer.lr 0.001 -> 1e-05."
    )
    steps = []
    for step in (0, 1):
        shared = {"areal_debug/x": {"status": "identical"}}
        shared["ppo_actor/update/n_masked_tokens"] = {"status": "not_replayed"}
        shared["ppo_actor/update/only_here"] = {"status": "not_recorded"}
        # An areal-debug statistic an older recording lacks is not one side's.
        shared["areal_debug/new"] = {"status": "not_recorded"}
        steps.append(StepComparison(step, "incomplete", shared))
    r = report([])
    r.steps = steps
    r.config_changes = [c.to_json() for c in changes]
    r.areal_change = "AReaL 1.0.4 is installed, the recording was made with AReaL main"
    assert r.headline() == (
        "identical to the recording at every step (2) in what was compared; "
        "AReaL 1.0.4 is installed, the recording was made with AReaL main; "
        "settings only one side has: actor.logprobs_chunk_size; "
        "statistics only the recording has: ppo_actor/update/n_masked_tokens; "
        "statistics only the replay logs: ppo_actor/update/only_here"
    )
    # A statistic both have that moved within the tolerance is still said.
    steps[1].metrics["areal_debug/x"] = {"status": "within_tolerance"}
    assert r.headline().startswith("within tolerance at every step (1 of 2 bitwise)")


def test_a_logp_divergence_without_layer_digests_says_how_to_go_one_level_down():
    """Issue 69, point 2: the demo replayed with one sequence per micro-batch leaves
    the recording at step 0's log-probs, but its recording has no layer digests of
    step 0: the story gives the exact second replay and diff that name the layer."""
    from areal_debug.compare.replay import one_level_down

    r = report(["diverged"], [], {"stage": "logp", "where": "trajectory 1"})
    path = "/root/logs/u/tinydemo/unpacked/replay_report.json"
    hint = one_level_down(r, path)
    assert hint == (
        "no layer digests of step 0 in the recording: to find the layer where the "
        "log-probs start to differ, replay it as recorded (without your changes) "
        "with debug.layer_digests=0 debug.replay_trial_name=unpacked_as_recorded, "
        "this one again with debug.layer_digests=0, then `areal-debug diff "
        "/root/logs/u/tinydemo/unpacked_as_recorded /root/logs/u/tinydemo/unpacked`"
    )
    # This replay digested its layers; the recording did not: only the other run.
    r.steps[0].stages["logp"]["layers"] = {
        "status": "not_compared",
        "reason": "the recording has no layer digests of this step",
    }
    assert ", this one again" not in one_level_down(r, path)
    # Where the layers are compared, the report names the layer itself.
    r.steps[0].stages["logp"]["layers"] = {"status": "differs", "where": "x"}
    r.steps[0].stages["logp"]["below"] = "model.layers.0.self_attn"
    assert one_level_down(r, path) is None
    # A divergence at another stage has nothing below the log-probs to find.
    other = report(["diverged"], [], {"stage": "weights", "where": "lm_head"})
    assert one_level_down(other, path) is None


def test_a_what_if_replays_first_metric_is_the_setting_changed_not_a_kl():
    """Issue 69, point 4: with the learning rate changed, the KL recorded near 0
    has the largest relative difference; the first divergence names the changed
    setting's own statistic, and the summary's column counts the metrics that
    moved from 0 instead of reading "recorded 0"."""
    from areal_debug.compare.statistics import _max_relative

    lr = {"key": "actor.optimizer.lr", "recorded": 1e-3, "replay": 1e-5}
    r = report(["diverged"], [lr])
    r.steps[0].metrics = {
        "ppo_actor/update/kl_div_taylor/max": {
            "status": "diverged", "recorded": 1e-9, "replayed": 1e-5,
            "rel_diff": 1e4,
        },
        "ppo_actor/update/lr": {
            "status": "diverged", "recorded": 1e-3, "replayed": 1e-5,
            "rel_diff": 0.99,
        },
    }  # fmt: skip
    assert r.first_divergence()["metric"] == "ppo_actor/update/lr"
    assert r.first_divergence()["num_diverged_metrics"] == 2
    r.config_changes = []
    assert r.first_divergence()["metric"] == "ppo_actor/update/kl_div_taylor/max"
    assert _max_relative([0.5, math.inf, math.inf, 0.0]) == "0.5 (+2 from 0)"
    assert _max_relative([0.0, 0.25]) == "0.25"
    assert _max_relative([math.inf]) == "- (+1 from 0)"
