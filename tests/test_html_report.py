# SPDX-License-Identifier: Apache-2.0
"""``areal-debug report``: the self-contained HTML page of a run or a replay.

The page is checked as a file (self-contained, its data, --steps and the cap) and,
where Debian's chromium is installed, in a real headless browser for what a person
sees: the decoded prompt, every step, the divergence marker, a step's trajectories
and a trajectory's coloured tokens. The process-level tests read the session's
``spmd_d1`` recording and its replay ``spmd_d1_replay`` (a copy of that replay's
report, edited, stands for a divergent replay); none starts a process of its own.
"""

import json
import math
import os
import re

import pytest
import torch
from support.browser import needs_browser, open_page
from support.recordings import SC_SPIKE_NATS, SC_SPIKE_STEP
from support.system_parts import missing_system_part
from test_cli_inspect import record_with_stats, report_path, run_json

from areal_debug.cli import main
from areal_debug.compare.report import (
    REPORT_NAME,
    ReplayReport,
    StepComparison,
    TopologyChange,
)
from areal_debug.compare.statistics import compare_values
from areal_debug.inspect.commands import report as report_command
from areal_debug.inspect.page import report as html_report
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.recording_writer import RecordingWriter

MAX_PAGE_BYTES = 5 * 2**20
GRAD_NORM = "ppo_actor/update/grad_norm"


def page_data(path) -> dict:
    """The JSON the page carries (what its script draws)."""
    text = open(path, encoding="utf-8").read()
    found = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S
    )
    assert "<" not in found.group(1)  # recorded texts cannot end the element
    return json.loads(found.group(1))


def assert_self_contained(path) -> None:
    text = open(path, encoding="utf-8").read()
    assert os.path.getsize(path) < MAX_PAGE_BYTES
    # Nothing the browser would fetch: no external script, style, image or link.
    assert not re.search(r"<script[^>]*\bsrc=", text, re.I)
    assert not re.search(r"<link\b", text, re.I)
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:)?//""", text, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", text, re.I)


LR_CHANGE = {"key": "actor.optimizer.lr", "recorded": 0.001, "replay": 0.002}


def divergent_report(rec: str, out_dir, step: int, stage: dict | None = None) -> str:
    """A replay report of ``rec`` whose ``step`` diverged (grad norm doubled, and
    ``stage`` as its first differing stage), every step before identical."""
    reader = RecordingReader(rec)
    steps = []
    for s in reader.available_steps():
        stats = reader.recorded_stats(s) or {}
        metrics = {}
        for name, value in stats.items():
            replayed = value * 2 if (s == step and name == GRAD_NORM) else value
            metrics[name] = compare_values(value, replayed, 0.0, 0.0)
        diverged = s == step
        stages = {
            name: {"status": "identical", "compared": 1, "differing": 0}
            for name in ("logp", "loss", "grads", "weights")
        }
        if diverged and stage:
            stages[stage["stage"]] = {"status": "differs", **stage}
        steps.append(
            StepComparison(
                s, "diverged" if diverged else "identical", metrics, {}, stages
            )
        )
    report = ReplayReport(rec, 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1))
    report.steps = steps
    report.config_changes = [LR_CHANGE]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(str(out_dir), REPORT_NAME)
    with open(path, "w") as f:
        json.dump(report.to_json(), f)
    return path


def keep_stage_tensors(rec: str, steps) -> None:
    """Add the per-token stage tensors a ``debug.record_stage_tensors`` dump keeps
    (one rank, one tensor per trajectory dict) to a recording's steps, as AReaL
    computes them: rows in another order than recorded (here reversed), the
    value at position p that of token p+1, each row's tokens kept beside them."""
    w = RecordingWriter(rec, shard=0, num_shards=1, steps_per_epoch=10)
    reader = RecordingReader(rec)
    for step in steps:
        (traj,) = reader.load_shard(step, 0)
        order = list(reversed(range(traj["input_ids"].shape[0])))

        def trainer(t):
            return torch.roll(t, shifts=-1, dims=-1)[order]

        tokens = traj["input_ids"].masked_fill(~traj["attention_mask"].bool(), -1)
        tensors = {
            "rank 0/logp/trajectory 0": trainer(traj["logprobs"] - 0.5),
            "rank 0/logp/trajectory 0 tokens": tokens[order],
            "rank 0/ref_logp/trajectory 0": trainer(traj["logprobs"] - 1.0),
            "rank 0/ref_logp/trajectory 0 tokens": tokens[order],
        }
        stages = {"ranks": [{"logp": {"trajectory 0": ["0" * 32, None]}}]}
        w.submit_stages(step, {**stages, "global": {}}, tensors)
    w.close()


# -- the page as a file --------------------------------------------------------------
def test_the_page_is_one_self_contained_file_with_the_run(tmp_path, capsys):
    rec, out = str(tmp_path / "rec"), tmp_path / "run.html"
    record_with_stats(rec, steps=4, anomaly_at=2, incomplete=4)
    rc, result = run_json(capsys, "report", rec, "-o", str(out))
    assert rc == 0 and result["path"] == str(out) and result["steps"] == [0, 1, 2, 3]
    assert result["bytes"] == os.path.getsize(out)
    assert_self_contained(out)
    data = page_data(out)
    assert [m["name"] for m in data["metrics"]][:2] == [
        "ppo_actor/update/actor_loss/avg",
        GRAD_NORM,
    ]
    assert data["anomalies"] == [
        {"step": 2, "reasons": ["ppo_actor/update/grad_norm is nan"]}
    ]
    assert data["incomplete"] == [4] and data["series"]["2"][GRAD_NORM] == "nan"
    step = data["details"]["1"]
    assert step["num_trajectories"] == 2 and step["left_out"] == 0
    rewards = [r["reward"] for r in step["rows"]]
    assert step["groups"][0]["mean"] == pytest.approx(sum(rewards) / 2)
    # No tokenizer named by this recording: token ids, and a note saying what to do.
    assert data["tokenizer"]["loaded"] is False
    assert "--tokenizer PATH" in data["notes"][0]
    assert step["rows"][0]["completion"].startswith("<")
    # The words of the command's output.
    assert main(["report", rec, "-o", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"wrote {out}" in text and "steps 0-3" in text and "8 shown" in text


def test_steps_and_the_cap_keep_large_recordings_small(tmp_path, capsys):
    rec, out = str(tmp_path / "rec"), tmp_path / "part.html"
    record_with_stats(rec, steps=4, anomaly_at=2, incomplete=4)
    argv = ["report", rec, "-o", str(out), "--steps", "1-2", "--max-per-step", "1"]
    rc, result = run_json(capsys, *argv, "--max-tokens", "3")
    assert rc == 0 and result["steps"] == [1, 2]
    assert result["trajectories"] == 2 and result["trajectories_left_out"] == 2
    data = page_data(out)
    assert sorted(data["details"]) == ["1", "2"] and data["incomplete"] == []
    assert sorted(data["series"]) == ["1", "2"]
    row = data["details"]["1"]["rows"][0]
    assert data["details"]["1"]["left_out"] == 1
    assert len(row["tokens"]) == len(row["logp"]) == 3 and row["tokens_left_out"] == 2
    # Group statistics still count the trajectories left out.
    assert data["details"]["1"]["groups"][0]["n"] == 2
    assert main(argv) == 0
    assert "2 left out (--max-per-step)" in capsys.readouterr().out
    # The CLI's defaults are the module's (the CLI does not import it: torch).
    assert report_command.MAX_PER_STEP == html_report.DEFAULT_MAX_PER_STEP
    assert report_command.MAX_TOKENS == html_report.DEFAULT_MAX_TOKENS


def test_a_divergent_replay_and_the_kept_stage_tensors(tmp_path, capsys):
    rec, out = str(tmp_path / "rec"), tmp_path / "replay.html"
    record_with_stats(rec, steps=4, anomaly_at=9, incomplete=4)
    keep_stage_tensors(rec, [0, 1, 2, 3])
    stage = {"stage": "logp", "where": "trajectory 0", "position": [1, 3]}
    stage.update(max_abs_diff=0.25, max_rel_diff=0.1, differing=1, compared=1)
    # Below the log-probs (issue 59): the first layer, in recorded row 1.
    stage["layers"] = {
        "status": "differs",
        "module": "model.layers.0.self_attn",
        "group": 0,
        "group_sample": 1,
        "token": 2,
    }
    report = divergent_report(rec, tmp_path / "logs" / "lp", 1, stage)
    rc, result = run_json(
        capsys, "report", rec, os.path.dirname(report), "-o", str(out)
    )
    assert rc == 0 and result["first_divergence"] == [1, GRAD_NORM]
    data = page_data(out)
    replay = data["replay"]
    assert replay["label"] == "replay lp" and replay["status"]["1"] == "diverged"
    assert replay["series"]["1"][GRAD_NORM] == 2 * data["series"]["1"][GRAD_NORM]
    first = replay["stage_report"]
    assert first["step"] == 1 and first["stages"][0]["stage"] == "logp"
    assert first["stages"][0]["where"] == "trajectory 0"
    assert "logp differs first at trajectory 0" in first["line"]
    # Its mismatch from step 1 (logp) on is not the engine's gap: said per step.
    assert replay["mismatch_meaning"] == {
        "1": "not the recording's model or forward (step 1: logp)",
        "2": "policy drift since step 1",
        "3": "policy drift since step 1",
    }
    # Recorded vs the kept stage tensors on each token, the divergent one named.
    rows = data["details"]["1"]["rows"]
    # The report's row 1, column 3 of trajectory 0 is recorded row 0 (AReaL's
    # order reversed it), token 4 (column p is token p+1).
    assert rows[0]["divergent_token"] == 4 and "divergent_token" not in rows[1]
    assert rows[1]["divergent_layer"] == {
        "module": "model.layers.0.self_attn",
        "token": 2,
    }
    assert "divergent_layer" not in rows[0]
    for row in rows:
        # Token 0 is predicted by nothing; every other pairs with its own value.
        assert row["stage_logp"][0] is None and row["stage_ref_logp"][0] is None
        got = [a - b for a, b in zip(row["logp"][1:], row["stage_logp"][1:])]
        assert got == [500] * 4
        got = [a - b for a, b in zip(row["logp"][1:], row["stage_ref_logp"][1:])]
        assert got == [1000] * 4
    assert_self_contained(out)


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["report", "{missing}", "-o", "{out}"], 2, "does not exist"),
        (["report", "{tmp}", "-o", "{out}"], 1, "is not a recording"),
        (["report", "{rec}", "{tmp}", "-o", "{out}"], 1, "is not a replay report"),
        (["report", "{rec}", "-o", "{out}", "--steps", "7"], 1, "names no complete"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, code, message):
    rec = str(tmp_path / "rec")
    record_with_stats(rec, steps=2, anomaly_at=9, incomplete=2)
    values = dict(
        missing=str(tmp_path / "nope"), out=str(tmp_path / "p.html"), tmp=str(tmp_path)
    )
    capsys.readouterr()  # what the set-up's writer logged is not the command's
    assert main([a.format(rec=rec, **values) for a in argv]) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(values["out"])


# -- in a real browser ---------------------------------------------------------------
def coloured_tokens(page) -> list[str]:
    return page.eval_on_selector_all(
        "#tokens .tok", "els => els.map(e => getComputedStyle(e).backgroundColor)"
    )


@needs_browser
def test_the_page_in_a_browser_small_recording(tmp_path):
    rec, out = str(tmp_path / "rec"), tmp_path / "replay.html"
    record_with_stats(rec, steps=4, anomaly_at=2, incomplete=4)
    keep_stage_tensors(rec, [0, 1, 2, 3])
    report = divergent_report(rec, tmp_path / "logs" / "lr", 3)
    html_report.build_report(rec, report, str(out))
    with open_page(str(out)) as page:
        assert page.errors == [] and page.outside_requests == []
        buttons = page.locator("#steps .stepbtn").all_inner_texts()
        assert buttons == ["step 0", "step 1", "step 2", "step 3", "4 (incomplete)"]
        assert "First divergence: step 3" in page.inner_text("#first-divergence")
        # The replay's story in the banner: its headline and what was changed.
        assert page.inner_text("#story").startswith(
            "Replay story: left the recording at step 3: "
        )
        assert page.inner_text("#story").endswith("you changed actor.optimizer.lr")
        assert page.inner_text("#config-changes") == (
            "Changed from the recording: actor.optimizer.lr 0.001 → 0.002"
        )
        assert page.locator(".divergence-line").count() == 7  # one per chart
        assert page.locator("path.pin").count() == 7
        page.click(".stepbtn[data-step='3']")
        assert page.locator("#traj-rows tr").count() == 2
        # The gap at first sight: rows open worst |d| first (d = trainer - engine
        # at each row's worst token).
        assert page.inner_text("#traj-table th[data-key='worst_delta']") == "worst Δ ▼"
        worst = page.locator("#traj-rows tr td:nth-child(12)").all_inner_texts()
        assert len(worst) == 2 and all(abs(float(w) + 0.5) < 1e-5 for w in worst)
        # Filter and sort as a person would: reward below x, highest first.
        page.fill(".filters input >> nth=0", "-1")
        assert page.locator("#traj-rows tr").count() == 0
        page.fill(".filters input >> nth=0", "")
        page.click("#traj-table th[data-key='reward']")
        rewards = page.locator("#traj-rows tr td:nth-child(3)").all_inner_texts()
        assert [float(r) for r in rewards] == sorted(map(float, rewards), reverse=True)
        page.click("#traj-rows tr >> nth=0")
        # Four to colour by: generation, recomputed and reference log-probs, and
        # the mismatch between the first two, which the view opens with.
        assert page.locator("#traj select option").count() == 4
        assert page.inner_text("#coloured-by") == "Δ = trainer − engine log-prob"
        assert page.eval_on_selector("#traj select", "e => e.value") == "delta"
        # (The page holds log-probs in thousandths: d may read -0.499 or -0.501.)
        # This recording's first completion token sits at position 0, which
        # nothing predicts: no trainer log-prob, no d, no colour. The rest: d at
        # the step's 99th percentile of |d|, the scale's end, below 0: blue.
        first, *rest = coloured_tokens(page)
        assert first == "rgba(0, 0, 0, 0)" and len(rest) == 4
        for colour in rest:
            red, green, blue = map(float, re.findall(r"[\d.]+", colour))
            assert red <= 40 and 95 <= green <= 110 and blue >= 170, colour
        legend = page.inner_text("#traj p.muted")
        assert "Δ −0.501 " in legend or "Δ −0.5 " in legend, legend
        assert "99th percentile of |Δ|" in legend
        # The sign is kept: above the engine red, below blue, white at 0.
        assert page.evaluate("diverging(1)") == "rgb(215,48,39)"
        assert page.evaluate("diverging(-1)") == "rgb(33,102,172)"
        assert page.evaluate("diverging(0)") == "rgb(255,255,255)"
        # A toggle back to the log-probs; the label follows the switch.
        page.select_option("#traj select", "logp")
        assert page.inner_text("#coloured-by") == "recorded log-prob (generation)"
        colours = coloured_tokens(page)
        assert len(colours) == 5 and "rgba(0, 0, 0, 0)" not in colours
        page.select_option("#traj select", "stage_logp")
        assert page.inner_text("#coloured-by").startswith("recomputed log-prob")
        assert coloured_tokens(page) != colours
        page.select_option("#traj select", "delta")
        tip = page.get_attribute("#tokens .tok >> nth=1", "title")
        d = float(re.search(r"Δ = trainer − engine log-prob: (\S+)", tip)[1])
        ratio = float(re.search(r"importance ratio exp\(Δ\): (\S+)", tip)[1])
        assert abs(d + 0.5) <= 0.0015 and ratio == pytest.approx(math.exp(d), 1e-3)
        page.select_option("#traj select", "stage_logp")
        gradient = page.eval_on_selector(
            ".scale", "e => getComputedStyle(e).backgroundImage"
        )
        assert gradient.startswith("linear-gradient(to right, rgb(200, 240, 200)")
        assert (
            page.eval_on_selector(
                "#tokens .tok", "e => getComputedStyle(e).marginRight"
            )
            == "2px"
        )
        # Round ticks: one step of 1, 2 or 5 times a power of ten between them.
        charts = page.eval_on_selector_all(
            ".chart",
            "cs => cs.map(c => [...c.querySelectorAll('.ytick')].map(t => t.textContent))",
        )
        assert len(charts) == 7
        for labels in charts:
            ticks = [float(t) for t in labels]
            gaps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:])}
            assert len(ticks) >= 3 and len(gaps) == 1, ticks
            (gap,) = gaps
            mantissa = gap / 10 ** math.floor(math.log10(gap) + 1e-9)
            assert round(mantissa, 6) in (1, 2, 5), ticks
        # Each click is a link a colleague can open: the same step and trajectory,
        # named as the CLI names it (step, group, sample; the batch index beside).
        shown = page.inner_text("#traj h2")
        hash_ = page.evaluate("location.hash")
        m = re.fullmatch(r"#step=3&group=(\d+)&sample=(\d+)", hash_)
        assert m, hash_
        assert shown.startswith(f"Step 3, group {m[1]}, sample {m[2]} (trajectory #")
        page.goto(page.url.split("#")[0] + hash_)
        page.reload()
        assert page.inner_text("#traj h2") == shown
        assert page.locator(".stepbtn.sel").inner_text() == "step 3"
        # Back and Forward walk the views: the step, then the trajectory again.
        page.click(".stepbtn[data-step='1']")
        assert page.evaluate("location.hash") == "#step=1"
        page.go_back()
        assert page.evaluate("location.hash") == hash_
        assert page.inner_text("#traj h2") == shown
        assert page.locator(".stepbtn.sel").inner_text() == "step 3"
        page.go_forward()
        assert page.locator(".stepbtn.sel").inner_text() == "step 1"
        assert page.locator("#traj").is_hidden()
        # The batch index (the page's old links) opens the same trajectory.
        index = re.search(r"trajectory #(\d+)", shown)[1]
        page.goto(page.url.split("#")[0] + f"#step=3&traj={index}")
        page.reload()
        assert page.inner_text("#traj h2") == shown
        # A link to nothing says so, rather than showing nothing.
        page.goto(page.url.split("#")[0] + "#step=99&group=500")
        page.reload()
        note = page.inner_text("#link-note")
        assert "names step 99, which this page does not hold" in note, note
        page.goto(page.url.split("#")[0] + "#step=3&group=500&sample=0")
        page.reload()
        assert "names group 500, sample 0 of step 3" in page.inner_text("#link-note")
        assert page.errors == []


@pytest.mark.areal
def test_report_of_the_suites_recording_and_its_replay(
    spmd_d1, spmd_d1_replay, tmp_path
):
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    out = tmp_path / "replay.html"
    result = html_report.build_report(
        spmd_d1.path, report_path(spmd_d1.workdir), str(out)
    )
    assert result.first_divergence is None and result.tokenizer is not None
    assert result.bytes < MAX_PAGE_BYTES
    assert_self_contained(out)
    data = page_data(out)
    assert data["steps"] == list(range(5)) and data["manifest"]["trial"] == "t0"
    row = data["details"]["2"]["rows"][0]
    assert data["details"]["2"]["prompts"][row["prompt"]].startswith("user: what is")
    assert row["versions"] == [2, 2] and row["staleness"] == [0, 0]
    # The replay blamed step 1 (debug.blame_steps): its rows carry their shares,
    # the step its top samples; the other steps neither.
    blamed = data["details"]["1"]
    assert len(blamed["blame"]["top"]) == 5 and blamed["blame"]["origin"] is None
    assert all(isinstance(r["grad_share"], float) for r in blamed["rows"])
    assert data["details"]["2"]["blame"] is None
    if (why := browser_missing()) is not None:
        missing_system_part(why)
    with open_page(str(out)) as page:
        assert page.errors == [] and page.outside_requests == []
        assert "identical" in page.inner_text("#verdict")
        page.click(".stepbtn[data-step='1']")
        assert "Samples that drove this step's update" in page.inner_text("#blame")
        assert "grad share" in page.inner_text("#traj-table thead")
        buttons = page.locator("#steps .stepbtn").all_inner_texts()
        assert buttons == [f"step {s}" for s in range(5)]
        page.click(".stepbtn[data-step='2']")
        assert page.locator("#traj-rows tr").count() == 32  # 8 prompts x 4 samples
        assert "user: what is" in page.inner_text("#traj-table")
        page.click("#traj-rows tr >> nth=0")
        assert "user: what is" in page.inner_text("#tokens")
        assert len(coloured_tokens(page)) == row["completion_len"]


@pytest.mark.areal
def test_report_of_a_divergent_replay_of_the_suites_recording(
    spmd_d1, spmd_d1_replay, tmp_path
):
    """The replay's report, edited as a replay with a changed learning rate reads
    (its loss first differs at step 3): the page marks and names that step."""
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    data = json.load(open(report_path(spmd_d1.workdir)))
    edited = tmp_path / "logs" / "lr"
    edited.mkdir(parents=True)
    stage = {
        "stage": "loss",
        "where": "mini-batch 0 micro-batch 0",
        "mini_batch": 0,
        "recorded": -0.03,
        "replayed": -0.05,
        "abs_diff": 0.02,
        "differing": 2,
        "compared": 4,
    }
    path = divergent_report(spmd_d1.path, edited, 3, stage)
    report = json.load(open(path))
    assert report["recording"] == data["recording"]
    out = tmp_path / "lr.html"
    result = html_report.build_report(spmd_d1.path, str(edited), str(out))
    assert result.first_divergence == (3, GRAD_NORM)
    if (why := browser_missing()) is not None:
        missing_system_part(why)
    with open_page(str(out)) as page:
        assert page.errors == []
        marker = page.inner_text("#first-divergence")
        assert "First divergence: step 3" in marker and GRAD_NORM in marker
        assert "First divergent stage: loss at mini-batch 0 micro-batch 0" in marker
        charts = page.locator(".chart").count()
        assert charts >= 6 and page.locator(".divergence-line").count() == charts
        assert "diverged" in page.get_attribute(".stepbtn[data-step='3']", "class")
        stages = page.inner_text("#stage-table")
        assert "loss" in stages and "differs" in stages and "abs diff 0.02" in stages
        page.click(".stepbtn[data-step='3']")
        assert "user: what is" in page.inner_text("#traj-table")


def browser_missing() -> str | None:
    from support.browser import missing_browser

    return missing_browser()


def packed_sdpa_recording(rec: str) -> None:
    """Three steps of 8 groups x 4 samples x 40 tokens, recorded by a run that
    packed its micro-batches for sdpa attention (the demo's CPU setting)."""
    from test_store import manifest, traj

    from areal_debug.recording.writer.start import write_manifest

    packed = {"actor": {"attn_impl": "sdpa", "mb_spec": {"max_tokens_per_mb": 1024}}}
    write_manifest(rec, {**manifest(), "config": packed})
    w = RecordingWriter(rec, shard=0, num_shards=1, steps_per_epoch=10)
    for step in range(3):
        w.submit_batch(
            step, [traj(step * 100 + k, group=4, length=40) for k in range(8)]
        )
        w.submit_stats(
            step,
            {
                GRAD_NORM: 2.0 - 0.1 * step,
                "ppo_actor/update/actor_loss/avg": 0.1 * step,
                "areal_debug/mismatch/abs_diff/avg": 0.04 + 0.01 * step,
            },
        )
    w.close()


def test_the_page_names_the_packing_that_makes_the_gap(tmp_path):
    """Issue 69, point 7: the demo's gap is the trainer's own packing (sdpa reads
    no sequence boundaries); the page says so beside the gap it shows, and the
    gap's chart comes first."""
    rec, out = str(tmp_path / "rec"), tmp_path / "page.html"
    packed_sdpa_recording(rec)
    html_report.build_report(rec, None, str(out))
    data = page_data(out)
    (note,) = [n for n in data["notes"] if n.startswith("Packing: ")]
    assert "actor.attn_impl=sdpa with micro-batches that pack several sequences" in note
    assert "each one after the first attends to those before it" in note
    assert "replay with one sequence per micro-batch" in note
    assert data["metrics"][0]["name"] == "areal_debug/mismatch/abs_diff/avg"
    assert [m["name"] for m in data["metrics"]].count(data["metrics"][0]["name"]) == 1
    # Unpacked (one sequence per micro-batch): no such note.
    one = str(tmp_path / "one")
    packed_sdpa_recording(one)
    config = {"actor": {"attn_impl": "sdpa", "mb_spec": {"max_tokens_per_mb": 40}}}
    reader = RecordingReader(one)
    from areal_debug.inspect.preflight.silent_configs import packed_attention

    assert packed_attention(reader, config) != []  # no seq_len stats: may pack
    config["actor"]["attn_impl"] = "flash_attention_2"
    assert packed_attention(reader, config) == []


@needs_browser
def test_a_link_opens_on_the_tokens_it_names(tmp_path):
    """Issue 69, point 7: the link `mismatch --top` prints opens the page on the
    trajectory's coloured tokens at its first paint, not among the charts above
    them (the page glided there, and a first look saw the charts)."""
    rec, out = str(tmp_path / "rec"), tmp_path / "page.html"
    packed_sdpa_recording(rec)
    html_report.build_report(rec, None, str(out))
    with open_page(str(out)) as page:
        page.goto(page.url.split("#")[0] + "#step=1&group=5&sample=2")
        page.reload()
        # At once: no wait for a scroll to end.
        top, bottom, charts_bottom, height = page.evaluate(
            "[document.getElementById('tokens').getBoundingClientRect().top,"
            " document.getElementById('tokens').getBoundingClientRect().bottom,"
            " document.getElementById('charts').getBoundingClientRect().bottom,"
            " innerHeight]"
        )
        assert 0 <= top and bottom <= height, (top, bottom, height)
        assert charts_bottom < 0, charts_bottom
        assert page.inner_text("#traj h2").startswith("Step 1, group 5, sample 2")
        first = page.get_attribute(".chart >> nth=0", "data-metric")
        assert first == "areal_debug/mismatch/abs_diff/avg"
        assert "Packing: the recorded run trained with" in page.inner_text("#notes")
        assert page.errors == []


def test_the_readme_screenshot_is_committed():
    shot = os.path.join(os.path.dirname(__file__), "..", "docs", "report.png")
    assert os.path.getsize(shot) < 400_000
    assert (
        "docs/report.png"
        in open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    )


def test_report_has_help_with_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["report", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "areal-debug report REC" in out
    assert "--max-per-step" in out and "--steps" in out


@pytest.mark.areal
def test_the_trainers_log_probs_are_paired_with_the_recorded_tokens(sc_d2, tmp_path):
    """The single-controller demo at 2 ranks kept the trainer's log-probs
    (debug.record_stage_tensors): AReaL reorders and redistributes the rows, and
    its value at position p is token p+1's. Paired by the tokens kept beside them
    and shifted, each row's trainer log-probs are those of the engine's model on
    the same tokens (the CPU server reports its own model's log-probs): a few
    hundredths of a nat apart; paired by position, about 0.7. At the step whose
    log-probs the server reported 4 nats low for a quarter of the tokens
    (``SC_SPIKE``), that quarter is 4 nats apart."""
    out = tmp_path / "sc.html"
    html_report.build_report(sc_d2.path, None, str(out), max_per_step=0)
    data = page_data(out)
    gaps: dict[bool, list[int]] = {True: [], False: []}  # spike step or not
    for detail in data["details"].values():
        assert detail["stage_note"] is None
        for row in detail["rows"]:
            assert "stage_logp" in row, (detail["step"], row["i"])
            gaps[detail["step"] == SC_SPIKE_STEP] += [
                abs(a - b)
                for a, b in zip(row["logp"], row["stage_logp"])
                if a is not None and b is not None
            ]
    clean, spike = gaps[False], gaps[True]
    assert clean and spike
    assert sum(clean) / len(clean) < 100, sum(clean) / len(clean)  # thousandths
    assert max(clean) < 1000
    planted = [g for g in spike if abs(g - SC_SPIKE_NATS * 1000) < 500]
    assert 0.1 < len(planted) / len(spike) < 0.45, (len(planted), len(spike))
    # Each row's worst token over all its loss tokens: at least the shown ones'.
    for detail in data["details"].values():
        for row in detail["rows"]:
            shown = max(
                abs(b - a)
                for a, b in zip(row["logp"], row["stage_logp"])
                if a is not None and b is not None
            )
            assert abs(row["worst_delta"]) * 1000 >= shown - 1


@needs_browser
def test_the_mismatch_chart_bands_the_replays_drift(tmp_path):
    """A replay that left the recording at step 1's weights: its mismatch at
    steps 2 and 3 is its own weights' drift, banded and labelled on the mismatch
    chart (the engine's gap up to step 1, unbanded)."""
    from test_cli_inspect import manifest, traj, write_manifest

    from areal_debug.inspect.plots.two_runs import MISMATCH

    rec, out = str(tmp_path / "rec"), tmp_path / "drift.html"
    write_manifest(rec, manifest())
    w = RecordingWriter(rec, shard=0, num_shards=1, steps_per_epoch=10)
    for step in range(4):
        w.submit_batch(step, [traj(step)])
        w.submit_stats(step, {MISMATCH[0]: 0.05 + 0.01 * step, GRAD_NORM: 1.0})
    w.close()
    stage = {"stage": "weights", "where": "lm_head.weight", "differing": 1}
    report = divergent_report(
        rec, tmp_path / "logs" / "lr", 1, {**stage, "compared": 1}
    )
    html_report.build_report(rec, report, str(out))
    assert set(page_data(out)["replay"]["mismatch_meaning"]) == {"2", "3"}
    with open_page(str(out)) as page:
        assert page.errors == [], page.errors
        chart = page.locator(f".chart[data-metric='{MISMATCH[0]}']")
        assert chart.locator(".drift-band").count() == 2
        assert page.locator(".drift-band").count() == 2  # no other chart
        assert chart.locator(".drift-label").text_content() == (
            "replayed: policy drift since step 1"
        )
