# SPDX-License-Identifier: Apache-2.0
"""areal-debug ls / show / diff / plot / doctor on real recordings and replays.

The process-level tests read the session's ``spmd_d1`` recording (5 steps,
recover checkpoints, anomaly pins) and its replay ``spmd_d1_replay``; none
starts a process of its own.
"""

import glob
import json
import os
import shutil

import pytest
import torch
from support.recordings import DROPOUT, SPMD_D1_STEPS
from test_store import manifest, record, traj

from areal_debug.cli import main
from areal_debug.recording.atomic import atomic_write_json
from areal_debug.recording.contents import BatchContents
from areal_debug.recording.format import (
    FORMAT_VERSION,
    STEP_META,
    shard_meta_name,
    step_dirname,
)
from areal_debug.recording.packed_payload import pack
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.payload_file import save_payload
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest

CONFIG = os.path.join(os.path.dirname(__file__), "configs", "tiny_fake.yaml")


def rewrite_payload(rec: str, step: int, shard: int, change) -> None:
    """Change a recorded batch with ``change(batch)`` and fix every checksum and
    the samples' digests in the metadata, as someone editing a recording on
    purpose would (or a dump run that recorded another batch)."""
    batch = RecordingReader(rec).load_shard(step, shard)
    change(batch)
    step_dir = os.path.join(rec, step_dirname(step))
    meta_path = os.path.join(step_dir, STEP_META)
    with open(meta_path) as f:
        meta = json.load(f)
    entry = meta["shards"][shard]
    stored = save_payload(
        os.path.join(step_dir, entry["file"]), pack(batch), entry.get("codec", "none")
    )
    fixed = {k: stored[k] for k in ("bytes", "raw_bytes", "sha256")}
    fixed["contents"] = BatchContents.of_batch(batch).to_json()
    entry.update(fixed)
    atomic_write_json(meta_path, meta)
    shard_path = os.path.join(step_dir, shard_meta_name(shard))
    with open(shard_path) as f:
        shard_meta = json.load(f)
    atomic_write_json(shard_path, {**shard_meta, **fixed})


def flip_reward(batch) -> None:
    batch[1]["rewards"][1] = batch[1]["rewards"][1] + 0.25


def run_json(capsys, *argv) -> tuple[int, object]:
    # Only what the command prints: the set-up's recorder may have logged to
    # stdout (AReaL's loggers write there once AReaL is loaded).
    capsys.readouterr()
    rc = main([argv[0], "--json", *argv[1:]])
    out = capsys.readouterr().out
    return rc, json.loads(out)


def report_path(workdir, trial="t0_replay") -> str:
    (path,) = glob.glob(
        os.path.join(
            str(workdir), "root", "logs", "*", "tiny", trial, "replay_report.json"
        )
    )
    return path


# -- small recordings through the real writer ------------------------------------
def test_diff_of_two_recordings_names_the_first_differing_element(tmp_path, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    steps = {0: [[traj(0), traj(1)]], 1: [[traj(2), traj(3)]]}
    record(a, steps)
    record(b, steps)
    rc, same = run_json(capsys, "diff", a, b)
    assert rc == 0 and same["first"] is None and same["identical_steps"] == [0, 1]
    rewrite_payload(b, 1, 0, flip_reward)
    rc, d = run_json(capsys, "diff", a, b)
    first = d["first"]
    assert rc == 3
    assert (first["step"], first["shard"], first["trajectory"], first["key"]) == (
        1,
        0,
        1,
        "rewards",
    )
    assert first["element"] == [1] and first["what"] == "value"
    assert first["b"] == pytest.approx(first["a"] + 0.25)
    assert d["identical_steps"] == [0]
    # The table names the same place.
    assert main(["diff", a, b]) == 3
    out = capsys.readouterr().out
    assert (
        "first payload difference: step 1, shard 0, trajectory 1, key 'rewards'" in out
    )


# The per-step statistics a one-recording plot draws by default, in panel order.
PLOTTED = [
    "ppo_actor/update/actor_loss/avg",
    "ppo_actor/update/grad_norm",
    "ppo_actor/task_reward/avg",
    "ppo_actor/update/importance_weight/avg",
    "ppo_actor/update/clip_ratio/avg",
    "ppo_actor/update/entropy/avg",
    "ppo_actor/seq_len/avg",
]
BLUE, RED = (31, 119, 180), (214, 39, 40)  # the recorded curve, anomaly pins
SHADE = (217, 210, 233)  # incomplete steps (opaque)


def png_colours(path):
    """A PNG as one int per pixel (0xRRGGBB), after checking it is a full figure."""
    import matplotlib.image

    assert os.path.getsize(path) > 20_000
    img = matplotlib.image.imread(str(path))
    height, width = img.shape[:2]
    assert width >= 1000 and height >= 600
    colours = torch.from_numpy((img[..., :3] * 255).round()).to(torch.int32)
    packed = colours[..., 0] * 65536 + colours[..., 1] * 256 + colours[..., 2]
    # Lines, markers, text and anti-aliasing: far more than a blank figure's few.
    assert packed.unique().numel() > 100
    return packed


def pixels(packed, rgb) -> int:
    return int((packed == rgb[0] * 65536 + rgb[1] * 256 + rgb[2]).sum())


def record_with_stats(path: str, steps: int, anomaly_at: int, incomplete: int):
    """A recording the way a dump run leaves it: each step's batch and statistics,
    an anomaly pin (the step and the one before) and a last step never finished."""
    write_manifest(path, manifest())
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    for step in range(steps):
        w.submit_batch(step, [traj(step)])
        stats = {name: 1.0 + 0.1 * i + 0.05 * step for i, name in enumerate(PLOTTED)}
        stats["ppo_actor/update/lr"] = 1e-3
        if step == anomaly_at:
            stats["ppo_actor/update/grad_norm"] = float("nan")
            w.submit_pin(step, ["ppo_actor/update/grad_norm is nan"], [step - 1, step])
        w.submit_stats(step, stats)
    w.submit_batch(incomplete, [traj(incomplete)])
    w.close()
    os.unlink(os.path.join(path, step_dirname(incomplete), STEP_META))


def test_plot_of_one_recording_marks_pins_and_incomplete_steps(tmp_path, capsys):
    rec, out = str(tmp_path / "rec"), tmp_path / "run.png"
    record_with_stats(rec, steps=4, anomaly_at=2, incomplete=4)
    rc, result = run_json(capsys, "plot", rec, "-o", str(out))
    assert rc == 0 and result["path"] == str(out)
    assert result["metrics"] == PLOTTED and result["steps"] == [0, 1, 2, 3]
    assert result["anomalies"] == [
        {"step": 2, "reasons": ["ppo_actor/update/grad_norm is nan"]}
    ]
    assert result["pinned"] == [1, 2] and result["incomplete"] == [4]
    packed = png_colours(out)
    assert pixels(packed, BLUE) and pixels(packed, RED)
    # The incomplete step's band, the height of each of the 7 panels.
    assert pixels(packed, SHADE) > 5_000
    # What was drawn, in words: every panel, the pin and why, the step left out.
    assert main(["plot", rec, "-o", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # as wrapped at 120 columns
    assert "7 metrics of the recorded run exp/t0 over steps 0-3" in text
    assert all(name in text for name in PLOTTED)
    assert "anomalies step 2 (red pins); step 2: ppo_actor/update/grad_norm is nan" in (
        text
    )
    assert "incomplete step 4" in text
    # --metric: any recorded statistic, and only those.
    rc, one = run_json(
        capsys, "plot", rec, "-o", str(out), "--metric", "ppo_actor/update/lr"
    )
    assert rc == 0 and one["metrics"] == ["ppo_actor/update/lr"]
    assert main(["plot", rec, "-o", str(out), "--metric", "nope"]) == 1
    assert "['nope'] are not in the statistics recorded" in capsys.readouterr().err


def test_ls_finds_every_recording_under_a_root(tmp_path, capsys):
    record(
        str(tmp_path / "x" / "exp" / "t1" / "areal_debug_recording"), {0: [[traj(0)]]}
    )
    record(
        str(tmp_path / "y" / "areal_debug_recording"), {0: [[traj(1)]], 1: [[traj(2)]]}
    )
    os.unlink(tmp_path / "y" / "areal_debug_recording" / step_dirname(1) / STEP_META)
    rc, found = run_json(capsys, "ls", str(tmp_path))
    assert rc == 0 and len(found) == 2
    y = next(r for r in found if r["path"].startswith(str(tmp_path / "y")))
    assert y["steps"] == [0] and y["incomplete"] == [1] and y["replays"] == []


def test_ls_prints_each_path_whole_on_a_narrow_terminal(tmp_path):
    from rich.console import Console

    from areal_debug.inspect import render
    from areal_debug.inspect.listing import list_recordings

    deep = (
        tmp_path / ("long-experiment-name-" * 3) / "trial_0" / "areal_debug_recording"
    )
    record(str(deep), {0: [[traj(0)]]})
    console = Console(width=60, record=True)
    # As the CLI prints (inspect/commands/output.emit): not cropped.
    console.print(render.listing(list_recordings(str(tmp_path))), crop=False)
    out = console.export_text()
    # Whole, on one line, where a copy takes it from; the table names it [1].
    assert f"[1] {deep}" in out.splitlines()
    assert "[1]" in out.split(f"[1] {deep}")[0]


def test_show_without_stats_and_without_decoding(tmp_path, capsys):
    record(str(tmp_path), {0: [[traj(0, group=3, length=6)]]})
    rc, view = run_json(capsys, "show", str(tmp_path), "--step", "0")
    assert rc == 0 and view["stats"] is None
    (t,) = view["trajectories"]
    assert len(t["sequences"]) == 3 and t["sequences"][0]["completion_tokens"] == 6
    assert t["sequences"][0]["prompt_text"] is None


def test_keys_areal_debug_does_not_know_are_kept_replayed_and_shown(tmp_path, capsys):
    """A MoE run's ``routed_experts`` (AReaL's RLVRWorkflow with
    return_routed_experts: [g, L, layers, top-k]), a per-sample sampling seed
    (rollout.deterministic_sampling) and a float key of the workflow's own:
    written by the recorder, read back as they were (a replay's head gets them
    too, re-sharded or not), and shown with their dtype, shape and values."""
    g = torch.Generator().manual_seed(7)
    batch = [traj(0, group=3, length=6), traj(1, group=3, length=6)]
    for t in batch:
        t["routed_experts"] = torch.randint(
            0, 8, (3, 6, 2, 2), generator=g, dtype=torch.int16
        )
        t["sampling_seed"] = torch.tensor([101, 102, 103], dtype=torch.int64)
        t["judge_scores"] = torch.rand(3, 6, generator=g)
    batch[1]["judge_scores"][0, 2] = float("nan")
    record(str(tmp_path), {0: [batch]})
    reader = RecordingReader(str(tmp_path))
    heads = reader.load_for_head(0, 0, 2) + reader.load_for_head(0, 1, 2)
    for loaded in (reader.load_shard(0, 0), heads):
        assert len(loaded) == len(batch)
        for mine, back in zip(batch, loaded):
            assert mine.keys() == back.keys()
            for k, v in mine.items():
                # Bit for bit, the NaN too.
                assert v.dtype == back[k].dtype and v.shape == back[k].shape, k
                assert torch.equal(v.view(torch.uint8), back[k].view(torch.uint8)), k
    assert reader.step_meta(0).shards[0].keys["routed_experts"] == "int16"
    rc, view = run_json(capsys, "show", str(tmp_path), "--step", "0")
    assert rc == 0
    first, second = view["trajectories"]
    assert sorted(first["other"]) == ["judge_scores", "routed_experts", "sampling_seed"]
    assert first["other"]["sampling_seed"] == "int64 [3]: [101, 102, 103]"
    lo, hi = (
        int(batch[0]["routed_experts"].min()),
        int(batch[0]["routed_experts"].max()),
    )
    n = batch[0]["routed_experts"].unique().numel()
    assert first["other"]["routed_experts"] == (
        f"int16 [3, 6, 2, 2]: {lo} to {hi}, {n} distinct"
    )
    assert first["other"]["judge_scores"].startswith("float32 [3, 6]: 0.")
    assert second["other"]["judge_scores"].endswith(", 1 NaN or inf")
    # The rich view: a table of them, each trajectory's.
    assert main(["show", str(tmp_path), "--step", "0"]) == 0
    shown = capsys.readouterr().out
    assert "Other keys (recorded and replayed as they are)" in shown
    assert shown.count("routed_experts") == 2 and "[101, 102, 103]" in shown


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["show", "{missing}", "--step", "0"], 2, "No recording at"),
        (["ls", "{missing}"], 2, "does not exist"),
        (["diff", "{missing}", "{rec}"], 2, "does not exist"),
        (["show", "{rec}", "--step", "7"], 1, "Step 7 is not a complete step"),
        (["show", "{rec}", "--step", "0", "--traj", "x"], 1, "is not a number"),
        (["show", "{rec}", "--step", "0", "--traj", "5"], 1, "do not exist"),
        (
            ["show", "{rec}", "--step", "0", "--tokenizer", "{missing}"],
            1,
            "Cannot load the tokenizer",
        ),
        (["plot", "{rec}", "-o", "{missing}/x.png"], 1, "holds no statistics"),
        (["extract", "{rec}", "--step", "3", "-o", "{missing}"], 1, "Step 3 is not"),
        (["doctor", "{rec}", "--", "python", "train.py"], 1, "No --config"),
        (
            ["doctor", "{rec}", "--", "x.py", "--config", "x.yaml", "debug.end_stpe=2"],
            1,
            "debug.end_stpe is not a debug key. Did you mean debug.replay_end_step",
        ),
        (
            [
                "doctor",
                "{rec}",
                "--",
                "x.py",
                "--config",
                "{yaml}",
                "actor.optimizr.lr=1",
            ],
            1,
            "'actor.optimizr.lr=1': actor has no key 'optimizr'; did you mean "
            "actor.optimizer.lr?",
        ),
        (["verify", "{missing}"], 2, "No recording at {missing}: the directory"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, code, message):
    rec = str(tmp_path / "rec")
    record(rec, {0: [[traj(0)]]})
    missing = str(tmp_path / "missing")
    yaml = str(tmp_path / "c.yaml")
    with open(yaml, "w") as f:
        f.write("experiment_name: e\ntrial_name: t\nactor:\n  path: /m\n")
    argv = [a.format(rec=rec, missing=missing, yaml=yaml) for a in argv]
    message = message.format(missing=missing)
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("areal-debug: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_every_subcommand_has_help_with_examples(capsys):
    for command in ("ls", "show", "diff", "plot", "extract", "doctor"):
        with pytest.raises(SystemExit) as e:
            main([command, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "examples:" in out and f"areal-debug {command}" in out


# -- the session's real recording and replay ------------------------------------------
@pytest.mark.areal
def test_ls_shows_pins_checkpoints_and_the_replay_verdict(
    spmd_d1, spmd_d1_replay, capsys
):
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    rc, found = run_json(capsys, "ls", str(spmd_d1.workdir / "root"))
    assert rc == 0
    (rec,) = [r for r in found if r["trial"] == "t0"]
    steps = list(range(SPMD_D1_STEPS))
    assert (rec["experiment"], rec["mode"], rec["format_version"]) == (
        "tiny",
        "spmd",
        FORMAT_VERSION,
    )
    assert rec["steps"] == steps and rec["incomplete"] == []
    # The anomaly threshold fires at every step: each pins itself and two before.
    assert rec["pinned"] == steps and rec["checkpoints"] == steps
    assert rec["size_bytes"] > 0
    replay = next(r for r in rec["replays"] if r["trial"] == "t0_replay")
    assert replay["all_identical"] is True and replay["steps"] == steps
    assert main(["ls", spmd_d1.path]) == 0
    out = capsys.readouterr().out
    assert "tiny/t0" in out and "t0_replay: identical" in out


@pytest.mark.areal
def test_show_decodes_with_the_recorded_tokenizer(spmd_d1, capsys):
    rc, view = run_json(capsys, "show", spmd_d1.path, "--step", "2", "--decode")
    assert rc == 0
    assert view["num_trajectories"] == len(view["trajectories"]) == 8
    t = view["trajectories"][0]
    assert len(t["sequences"]) == 4  # gconfig.n_samples
    s = t["sequences"][0]
    assert s["prompt_text"].startswith("user: what is") and s["completion_tokens"] > 0
    assert s["versions"] == [2, 2] and s["staleness"] == [0, 0]
    rewards = [q["reward"] for q in t["sequences"]]
    assert t["reward_mean"] == pytest.approx(sum(rewards) / len(rewards))
    assert (
        view["stats"]["ppo_actor/update/grad_norm"]
        == (spmd_d1.run.stats_by_step()[2]["ppo_actor/update/grad_norm"])
    )
    assert main(["show", spmd_d1.path, "--step", "2", "--traj", "1", "--decode"]) == 0
    out = capsys.readouterr().out
    assert "Group 1 (trajectory dict 1 of the step)" in out and "assistant:" in out


@pytest.mark.areal
def test_diff_of_a_replay_and_its_recording(spmd_d1, spmd_d1_replay, capsys):
    report = report_path(spmd_d1.workdir)
    rc, d = run_json(capsys, "diff", report)
    assert rc == 0 and d["first_divergence"] is None
    assert d["steps"] == list(range(SPMD_D1_STEPS))
    grad = [r for r in d["rows"] if r["metric"] == "ppo_actor/update/grad_norm"]
    assert [r["a"] for r in grad] == [r["b"] for r in grad]
    assert all(r["status"] == "identical" for r in d["rows"])
    # Two reports: the same replay against itself, side by side.
    rc, d = run_json(capsys, "diff", report, os.path.dirname(report))
    assert rc == 0 and d["first_divergence"] is None


@pytest.mark.areal
def test_diff_of_an_edited_copy_names_step_and_metric(spmd_d1, tmp_path, capsys):
    copy = str(tmp_path / "rec")
    shutil.copytree(spmd_d1.path, copy, ignore=shutil.ignore_patterns("recover"))
    rewrite_payload(copy, 3, 0, flip_reward)
    # An edited stats.json too: the run comparison names that step and metric.
    stats_path = os.path.join(copy, step_dirname(3), "stats.json")
    with open(stats_path) as f:
        stats = json.load(f)
    stats["stats"]["ppo_actor/update/grad_norm"] *= 2
    atomic_write_json(stats_path, stats)
    rc, d = run_json(capsys, "diff", spmd_d1.path, copy)
    assert rc == 3
    assert (d["first"]["step"], d["first"]["trajectory"], d["first"]["key"]) == (
        3,
        1,
        "rewards",
    )
    assert d["identical_steps"] == [0, 1, 2]
    assert any(r["metric"] == "ppo_actor/update/grad_norm" for r in d["stats_of_first"])
    rc, runs = run_json(capsys, "diff", report_path(spmd_d1.workdir), copy)
    first = runs["first_divergence"]
    assert rc == 3 and first["step"] == 3
    assert first["metric"] == "ppo_actor/update/grad_norm"


@pytest.mark.areal
def test_plot_draws_a_readable_png(spmd_d1, spmd_d1_replay, tmp_path, capsys):
    out = tmp_path / "replay.png"
    rc, result = run_json(capsys, "plot", report_path(spmd_d1.workdir), "-o", str(out))
    assert rc == 0 and result["first_divergence"] is None
    assert "ppo_actor/update/grad_norm" in result["metrics"]
    packed = png_colours(out)
    # Both series' colours (matplotlib's blue and orange) are drawn.
    for rgb in (BLUE, (255, 127, 14)):
        assert pixels(packed, rgb), rgb


@pytest.mark.areal
def test_plot_of_the_recorded_run_alone(spmd_d1, tmp_path, capsys):
    out = tmp_path / "run.png"
    rc, result = run_json(capsys, "plot", spmd_d1.path, "-o", str(out))
    steps = list(range(SPMD_D1_STEPS))
    # The run's own training-inference mismatch is drawn too.
    mismatch = "areal_debug/mismatch/abs_diff/avg"
    assert rc == 0 and result["metrics"] == [*PLOTTED, mismatch]
    assert result["steps"] == steps
    # The anomaly threshold fires at every step: a pin at each, saying why.
    assert [a["step"] for a in result["anomalies"]] == steps
    assert all(
        a["reasons"][0].startswith("ppo_actor/update/grad_norm > 0 (it is ")
        for a in result["anomalies"]
    )
    assert result["pinned"] == steps and result["incomplete"] == []
    packed = png_colours(out)
    assert pixels(packed, BLUE) and pixels(packed, RED)
    assert not pixels(packed, SHADE)  # no incomplete step to shade
    assert main(["plot", spmd_d1.path, "-o", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # as wrapped at 120 columns
    assert f"8 metrics of the recorded run tiny/t0 over steps 0-{steps[-1]}" in text
    assert all(name in text for name in PLOTTED)
    assert f"anomalies steps 0-{steps[-1]} (red pins)" in text


def _doctor_argv(spmd_d1, *extra) -> list[str]:
    workdir = spmd_d1.workdir
    return [
        "doctor",
        spmd_d1.path,
        "--",
        "torchrun",
        "--nproc-per-node",
        "1",
        "train.py",
        "--config",
        CONFIG,
        f"cluster.fileroot={workdir}/root",
        f"actor.path={workdir}/model",
        *DROPOUT,
        "debug.replay_rollout_data=true",
        f"total_train_steps={SPMD_D1_STEPS}",
        *extra,
    ]


@pytest.mark.areal
def test_doctor_passes_a_faithful_replay_and_names_each_problem(
    spmd_d1, tmp_path, capsys
):
    rc, report = run_json(capsys, *_doctor_argv(spmd_d1, "debug.replay_start_step=3"))
    assert rc == 0, report
    assert report["kind"] == "replay" and report["start_step"] == 3
    severities = {f["severity"] for f in report["findings"]}
    assert "error" not in severities
    assert any(
        "kept recover checkpoint of step 2" in f["what"] for f in report["findings"]
    )
    # Training changes, broken groups, the recorded trial, missing steps, a
    # checkpoint that is not whole.
    broken = shutil.copytree(
        spmd_d1.path, spmd_d1.workdir / "doctor-copy", dirs_exist_ok=True
    )
    try:
        os.unlink(
            broken / "recover" / step_dirname(2) / "recover_info" / "step_info.json"
        )
        argv = _doctor_argv(
            spmd_d1,
            f"debug.path={broken}",
            "debug.replay_start_step=3",
            "total_train_steps=7",
            "actor.optimizer.lr=1e-5",
            "gconfig.n_samples=2",
            "debug.replay_trial_name=t0",
            "debug.drop_samples=1:99/*",
        )
        argv[1] = str(broken)
        rc, report = run_json(capsys, *argv)
        assert main(argv) == 1
        out = capsys.readouterr().out
    finally:
        shutil.rmtree(broken)
    assert "error(s)" in out and "what to do" in out
    assert rc == 1
    by_severity = {}
    for f in report["findings"]:
        assert f["what"] and f["why"] and f["fix"]
        by_severity.setdefault(f["severity"], []).append(f["what"])
    errors = " | ".join(by_severity["error"])
    assert "gconfig.n_samples is 2, the recording was made with 4" in errors
    assert "steps 5-6" in errors and "tiny/t0" in errors
    assert "checkpoint of step 2 is not whole" in errors
    assert "debug.drop_samples: step 1 has groups 0-7, not group 99" in errors
    assert any("actor.optimizer.lr" in w for w in by_severity["warning"])


@pytest.mark.areal
def test_doctor_names_the_silent_configurations_of_the_demos_config(spmd_d1, capsys):
    """The demo's config packs sequences under sdpa (AReaL #1442): doctor says so
    and how to get one sequence per micro-batch; that layout is then a change
    that is not bitwise; flash attention without its deterministic switch and
    Megatron's warn_only deterministic mode are named too."""

    def findings(*extra):
        rc, report = run_json(capsys, *_doctor_argv(spmd_d1, *extra))
        assert rc == 0, report
        return report["findings"]

    # AReaL's own config notes are doctor's findings, not lines above its output.
    (areal_note,) = [f for f in findings() if "AReaL's config check" in f["what"]]
    assert "use_decoupled_loss" in areal_note["what"], areal_note
    assert "CLIArgs" not in capsys.readouterr().err
    (packed,) = [f for f in findings() if "attn_impl=sdpa" in f["what"]]
    assert packed["severity"] == "warning" and "AReaL #1442" in packed["why"]
    shortest = doctor_shortest(spmd_d1)
    assert f"shortest recorded sequence {shortest} tokens" in packed["what"]
    # The longest recorded sequence, as the README says for the demo, where two of
    # the shortest do not fit in it (issue 69, point 6: doctor said 17, the README 16).
    longest = doctor_longest(spmd_d1)
    budget = longest if longest < 2 * shortest else 2 * shortest - 1
    one_per_mb = f"actor.mb_spec.max_tokens_per_mb={budget}"
    assert one_per_mb in packed["fix"]

    after = findings(one_per_mb)
    assert not [f for f in after if "attn_impl=sdpa" in f["what"]]
    (layout,) = [f for f in after if f["what"].startswith("actor.mb_spec")]
    assert "not expected to be bitwise" in layout["why"]

    flash = findings(
        "actor.attn_impl=flash_attention_2",
        "debug.deterministic=false",
        "+actor.megatron.use_deterministic_algorithms=true",
    )
    whats = " | ".join(f["what"] for f in flash)
    assert (
        "attn_impl=flash_attention_2 without FLASH_ATTENTION_DETERMINISTIC=1" in whats
    )
    assert "actor.megatron.use_deterministic_algorithms=true without" in whats
    # With debug.deterministic (the demo's), both are taken care of: no warning.
    kept = findings(
        "actor.attn_impl=flash_attention_2",
        "+actor.megatron.use_deterministic_algorithms=true",
    )
    assert not [f for f in kept if "FLASH_ATTENTION_DETERMINISTIC=1" in f["what"]]
    (strict,) = [f for f in kept if "megatron" in f["what"]]
    assert strict["severity"] == "info" and "keeps them strict" in strict["why"]


def doctor_longest(recording) -> int:
    reader = RecordingReader(recording.path)
    return max(
        int(reader.recorded_stats(s)["ppo_actor/seq_len/max"])
        for s in reader.available_steps()
    )


def doctor_shortest(recording) -> int:
    reader = RecordingReader(recording.path)
    return min(
        int(reader.recorded_stats(s)["ppo_actor/seq_len/min"])
        for s in reader.available_steps()
    )


def test_doctor_reads_the_training_dp_size_with_areals_parser(tmp_path):
    from types import SimpleNamespace

    from areal_debug.inspect.preflight import doctor

    record(str(tmp_path), {0: [[traj(0)]]}, steps_per_epoch=3)
    reader = RecordingReader(str(tmp_path))  # recorded with one data-parallel head
    config = SimpleNamespace(
        allocation_mode="sglang:d2+fsdp:d4t2",
        rollout=SimpleNamespace(backend=None),
        actor=SimpleNamespace(backend=None),
    )
    (finding,) = doctor._topology(reader, config)
    assert "training data-parallel size is 4, the dump run's was 1" in finding.what


def test_doctor_ends_a_replay_where_its_training_loop_does(tmp_path):
    """No end step or total_train_steps: the replay's epochs of recorded steps."""
    from types import SimpleNamespace

    from areal_debug.inspect.preflight import doctor
    from areal_debug.replay_plan import ReplayPlan

    record(str(tmp_path), {k: [[traj(k)]] for k in range(3)}, steps_per_epoch=3)
    reader = RecordingReader(str(tmp_path))
    debug = SimpleNamespace(replay_end_step=None)
    config = SimpleNamespace(total_train_epochs=1, total_train_steps=None, debug=debug)
    plan = ReplayPlan.of(reader.path, 5, None, None)
    end = doctor._last_step(reader, config, plan, "replay")
    assert end == 2 and doctor._last_step(reader, config, plan, "resume") is None
    (finding,) = doctor._range(reader, config, plan, end)
    assert finding.severity == doctor.ERROR
    assert "ends at step 2 (total_train_epochs=1 of 3 recorded steps)" in finding.what
    assert finding.fix == "set total_train_epochs=2 or more"


def test_doctor_reads_the_command_of_the_demos_run_replay_sh(tmp_path, monkeypatch):
    """The demo's run_replay.sh (written by the demo's own code), given to doctor
    as `bash run_replay.sh ARGS`: its exec line, the arguments in place of "$@",
    and the variables its env sets while the YAML is read."""
    from areal_debug.inspect.common import InspectError
    from areal_debug.inspect.preflight import doctor
    from areal_debug.tooling.demo import write_replay_script

    workdir = tmp_path / "my demo"
    workdir.mkdir()
    script = write_replay_script(workdir, 1, 3)
    command, env = doctor.script_command(
        ["bash", str(script), "actor.optimizer.lr=1e-5"]
    )
    assert env["AREAL_DEBUG_WORKDIR"] == str(workdir)
    assert "AREAL_SPMD_MODE" not in env  # env -u: unset, not set
    assert command[-2:] == ["debug.replay_rollout_data=true", "actor.optimizer.lr=1e-5"]
    assert "--config" in command and "$@" not in command
    # The YAML reads the workdir from the variable: the run's paths, not the default.
    monkeypatch.delenv("AREAL_DEBUG_WORKDIR", raising=False)
    with doctor.environment(env):
        config = doctor.load_command_config(command)
    assert config.actor.path == f"{workdir}/model"
    assert config.actor.optimizer.lr == 1e-5
    assert "AREAL_DEBUG_WORKDIR" not in os.environ
    # A script without an exec line is refused, saying what doctor reads.
    plain = tmp_path / "x.sh"
    plain.write_text("python train.py\n")
    with pytest.raises(InspectError, match="has no exec line"):
        doctor.script_command([str(plain)])
