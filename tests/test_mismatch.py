# SPDX-License-Identifier: Apache-2.0
"""The training–inference mismatch (areal_debug/stages/mismatch.py): each token
paired with itself across AReaL's shift, measured while recording, reproduced by a
replay, shown by `areal-debug mismatch`, and a gap planted at one token of one
trajectory found by replays on 1 and 2 ranks."""

import json
import math
import re
import shutil

import pytest
import torch
from support.harness import replay_report, run_torchrun
from support.recordings import (
    DROPOUT,
    SC_REFUSED_STEP,
    SC_SPIKE_NATS,
    SC_SPIKE_STEP,
    SC_SPIKE_THRESHOLD,
    SC_STEPS,
    SPMD_D1_STEPS,
)
from test_cli_inspect import record_with_stats, rewrite_payload, run_json
from test_html_report import page_data

from areal_debug.cli import main
from areal_debug.inspect.listing import pinned_steps
from areal_debug.inspect.page import report as html_report
from areal_debug.inspect.plots.one_run import anomalies
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages import mismatch

TOKENS = mismatch.TOKENS_STAT
ABS_MAX = mismatch.stat_name("abs_diff", "max")


def trajectory(engine: list[float], mask: list[int]) -> dict:
    """One sequence as AReaL's workflows return it: the engine's log-prob of
    token t at position t (0.0 where it generated nothing), the loss mask."""
    return {
        "logprobs": torch.tensor([engine]),
        "loss_mask": torch.tensor([mask], dtype=torch.int32),
    }


def test_each_token_is_paired_with_itself_across_areals_shift():
    # Prompt of 2 tokens (placeholder 0.0 log-probs), completion of 3.
    engine = [0.0, 0.0, -1.0, -2.0, -0.5]
    mask = [0, 0, 1, 1, 1]
    # The trainer's log-prob at position t is that of token t+1; the last
    # position has no next token.
    trainer = torch.tensor([[-9.0, -1.0, -2.0, -0.5, -7.0]])
    trainer[0, 2] += 0.75  # a gap planted at token 3 (the trainer's position 2)
    d, loss = mismatch.token_deltas([trajectory(engine, mask)], [trainer])
    assert loss.tolist() == [False, True, True, True, False]
    assert d[loss].tolist() == [0.0, 0.75, 0.0]
    # Prompt and padding placeholders never count, however far they are.
    stats = mismatch.token_stats(d, loss)
    assert stats["abs_diff"].tolist() == [0.0, 0.0, 0.75, 0.0, 0.0]


def test_the_statistics_are_the_formulas_the_readme_gives():
    d = torch.tensor([0.5, -1.0, 2.0, 0.0])
    loss = torch.tensor([True, True, True, False])
    s = mismatch.token_stats(d, loss)
    for i, x in enumerate([0.5, -1.0, 2.0]):
        assert s["k1"][i] == pytest.approx(-x)
        assert s["k2"][i] == pytest.approx(x * x / 2)
        assert s["k3"][i] == pytest.approx(math.exp(x) - 1 - x)
        assert s["ratio"][i] == pytest.approx(math.exp(x))
    assert s["over_log2"].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert s["over_log5"].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_a_jump_in_the_gap_pins_the_step():
    """The flight recorder's median-factor rule watches the mean |d| as it does
    losses and grad norms."""
    from areal_debug.recording.anomaly import AnomalyDetector

    name = mismatch.stat_name("abs_diff")
    detector = AnomalyDetector(median_factor=10.0, thresholds=[])
    for _ in range(8):
        assert detector.check({name: 0.02}) == []
    (why,) = detector.check({name: 0.5})
    assert name in why and "running median" in why


def test_a_replays_mismatch_after_it_left_the_recording_is_drift_not_the_gap(
    tmp_path, capsys
):
    """Up to where a replay leaves the recording its mismatch is the engine's gap;
    after it, the replay's own weights drifting from the ones that generated the
    rollouts (a learning-rate change took 0.043 to 0.108 at steps 1-3, shown as
    training-inference mismatch): labelled so in the CLI and the JSON."""
    rec = str(tmp_path / "rec")
    record_with_stats(rec, steps=3, anomaly_at=-1, incomplete=3)
    reader = RecordingReader(rec)

    def report(first):
        from areal_debug.compare.report import (
            ReplayReport,
            StepComparison,
            TopologyChange,
        )

        entries = []
        for step in reader.available_steps():
            stats = reader.recorded_stats(step)
            metrics = {k: {"replayed": v} for k, v in stats.items()}
            left = first is not None and step == first["step"]
            stages = (
                {first["stage"]: {"status": "differs", "where": first["where"]}}
                if left
                else {}
            )
            status = "diverged" if left else "identical"
            entries.append(StepComparison(step, status, metrics, {}, stages))
        topology = TopologyChange("spmd", "spmd", 1, 1, 1, 1)
        return ReplayReport(rec, 0.0, 0.0, topology, entries)

    weights_at_0 = report({"step": 0, "stage": "weights", "where": "x"})
    rows = mismatch.table(reader, None, weights_at_0)
    assert [r.replayed_is for r in rows] == [
        mismatch.ENGINE_GAP,
        "policy drift since step 0",
        "policy drift since step 0",
    ]
    other_model = report({"step": 0, "stage": "model", "where": "lm_head.weight"})
    assert mismatch.table(reader, None, other_model)[0].replayed_is.startswith(
        "not the recording's model or forward (step 0: model)"
    )
    identical = report(None)
    assert {r.replayed_is for r in mismatch.table(reader, None, identical)} == {
        mismatch.ENGINE_GAP
    }
    from rich.console import Console

    from areal_debug.inspect import render

    console = Console(width=200, record=True)
    console.print(render.mismatch(rec, rows))
    text = console.export_text()
    assert "replayed: policy drift since step 0" in text
    assert text.count("replayed: policy drift") == 2


def test_a_batch_without_engine_log_probs_is_not_measured():
    traj = {"loss_mask": torch.ones(1, 4, dtype=torch.int32)}
    assert mismatch.token_deltas([traj], [torch.zeros(1, 4)]) is None
    assert mismatch.record([traj], [torch.zeros(1, 4)]) is False


@pytest.mark.areal
def test_each_recorded_step_has_its_mismatch_and_a_replay_reproduces_it(
    spmd_d1, spmd_d1_replay, capsys, tmp_path
):
    assert spmd_d1_replay.returncode == 0, spmd_d1_replay.log[-3000:]
    reader = RecordingReader(spmd_d1.path)
    for step in range(SPMD_D1_STEPS):
        stats = reader.recorded_stats(step)
        # Every loss token of the step, never a prompt or padding token.
        assert stats[TOKENS] == stats["ppo_actor/n_valid_tokens"] > 0
        tokens, values = mismatch.of_stats(stats)
        assert set(values) == {
            f"{n}/{r}" for n in mismatch.NAMES for r in ("avg", "min", "max")
        }
        # The fake engine's log-probs are random: a real gap, measured.
        assert values["abs_diff/max"] >= values["abs_diff/avg"] > 0
        # exp(d) within exp(+-max |d|), computed on the same tokens.
        bound = math.exp(values["abs_diff/max"]) * (1 + 1e-5)
        assert 1 / bound <= values["ratio/min"] <= values["ratio/max"] <= bound
    report = replay_report(str(spmd_d1.workdir))
    for entry in report["steps"]:
        ours = {
            n: m for n, m in entry["metrics"].items() if n.startswith(mismatch.SCOPE)
        }
        assert len(ours) == 3 * len(mismatch.NAMES) + 1
        assert all(m["status"] == "identical" for m in ours.values()), ours
    # The logs root is not a report: one line saying what to give.
    assert main(["mismatch", spmd_d1.path, str(spmd_d1.workdir / "root")]) == 1
    assert "is not a replay report" in capsys.readouterr().err
    replay_dir = next((spmd_d1.workdir / "root" / "logs").glob("*/tiny/t0_replay"))
    rc, rows = run_json(capsys, "mismatch", spmd_d1.path, str(replay_dir))
    assert rc == 0 and [r["step"] for r in rows] == list(range(SPMD_D1_STEPS))
    assert all(r["recorded"] == r["replayed"] for r in rows)
    # The trainer's per-token log-probs are kept by default (record_trainer_logp):
    # the ratio's percentiles and the worst row, from the same tokens as the stats.
    for r in rows:
        fig, rec = r["per_token"], r["recorded"]
        assert fig["tokens"] == r["tokens"]
        assert rec["ratio/min"] <= fig["ratio_p50"] <= fig["ratio_p99"]
        assert fig["ratio_p99"] <= rec["ratio/max"] * (1 + 1e-5)
        assert fig["worst_abs_diff"] == pytest.approx(rec["abs_diff/max"], rel=1e-5)
        # The worst row's link in the report page (issue 69, point 8).
        want = f"#step={r['step']}&group={fig['worst_group']}&sample={fig['worst_row']}"
        assert fig["worst_link"] == want
    png = tmp_path / "gap.png"
    assert main(["mismatch", spmd_d1.path, str(replay_dir), "-o", str(png)]) == 0
    shown = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"Plot: {png}" in shown
    assert "mean|d|" in shown and ">log5" in shown and "r p99" in shown
    worst = max(rows, key=lambda r: r["per_token"]["worst_abs_diff"])
    assert f"page.html{worst['per_token']['worst_link']} opens the worst row" in shown


PLANTED = -50.0  # nats: no sampled token's log-prob is near it


def plant(batch) -> None:
    """The engine's log-prob of one completion token of trajectory 3 set far off."""
    traj = batch[3]
    mask = traj["loss_mask"][0]
    token = int(mask.nonzero()[1])
    traj["logprobs"][0, token] = PLANTED


def assert_top_finds_the_plant(copy, capsys) -> None:
    """``mismatch --top`` on a planted copy names the planted token first, at
    its place: the step, the trajectory in the step's batch, its row and
    position, both log-probs (the trainer's as the dump run kept them)."""
    batch = RecordingReader(str(copy)).load_batch(0)
    (where,) = [i for i, t in enumerate(batch) if (t["logprobs"] == PLANTED).any()]
    position = int((batch[where]["logprobs"][0] == PLANTED).nonzero()[0])
    rc, worst = run_json(capsys, "mismatch", str(copy), "--top", "3", "--steps", "0")
    assert rc == 0 and worst["notes"] == []
    first, second = worst["tokens"][:2]
    assert (first["step"], first["group"], first["row"]) == (0, where, 0)
    # One numbering with the page: its link to the trajectory.
    assert first["link"] == f"#step=0&group={where}&sample=0"
    assert first["position"] == position
    assert first["token"] == int(batch[where]["input_ids"][0, position])
    assert first["engine"] == PLANTED
    assert first["delta"] == pytest.approx(first["trainer"] - PLANTED)
    assert first["delta"] > abs(PLANTED) - 10 and abs(second["delta"]) < 5


@pytest.mark.areal
# On one rank it is the same check as on two without the re-split: a variant
# (make test-long, which CI runs).
@pytest.mark.parametrize("nproc", [pytest.param(1, marks=pytest.mark.variant), 2])
def test_a_gap_planted_at_one_token_is_found_on_1_and_2_ranks(
    spmd_d1, tmp_path, nproc, capsys
):
    """A copy of the one-process recording with one engine log-prob planted far
    off: `--top` names its place from the dump's kept trainer log-probs, and a
    replay on one rank, or re-split over two (each rank measuring its half, the
    token still paired with itself), measures exactly one token more beyond log 5."""
    copy = tmp_path / "rec"
    shutil.copytree(spmd_d1.path, copy)
    rewrite_payload(str(copy), 0, 0, plant)
    assert_top_finds_the_plant(copy, capsys)
    trial = f"planted{nproc}"
    run = run_torchrun(
        str(spmd_d1.workdir),
        trial,
        nproc,
        [
            f"actor.backend=fsdp:d{nproc}",
            f"rollout.backend=sglang:d{nproc}",
            *DROPOUT,
            "total_train_steps=1",
            "debug.replay_rollout_data=true",
            f"debug.path={copy}",
            f"debug.replay_trial_name={trial}",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    step = replay_report(str(spmd_d1.workdir), trial=trial)["steps"][0]["metrics"]
    recorded, replayed = step[ABS_MAX]["recorded"], step[ABS_MAX]["replayed"]
    assert recorded < 10 and replayed > abs(PLANTED) - 10, (recorded, replayed)
    # One token more beyond log 5, of the same tokens.
    over = mismatch.stat_name("over_log5")
    n = step[TOKENS]["replayed"]
    assert n == step[TOKENS]["recorded"]
    extra = (step[over]["replayed"] - step[over]["recorded"]) * n
    assert round(extra) == 1, json.dumps({k: step[k] for k in (over, TOKENS)})


@pytest.mark.areal
def test_top_names_a_planted_token_with_its_context(sc_d2, tmp_path, capsys):
    """``mismatch --top N`` on the single-controller recording (two ranks, the
    trainer's per-token log-probs kept): a copy with one engine log-prob planted
    far off lists that token first, where it is, both log-probs, in context."""
    copy = tmp_path / "rec"
    shutil.copytree(sc_d2.path, copy)
    rewrite_payload(str(copy), 0, 0, plant)
    assert_top_finds_the_plant(copy, capsys)
    rc, worst = run_json(capsys, "mismatch", str(copy), "--top", "1", "--steps", "0")
    first = worst["tokens"][0]
    assert first["context"].endswith("]]") and "[[" in first["context"]
    assert main(["mismatch", sc_d2.path, "--top", "2"]) == 0
    shown = capsys.readouterr().out
    assert "loss tokens furthest from the engine's log-probs" in shown
    joined = " ".join(shown.split())
    assert re.search(r"page\.html#step=\d+&group=\d+&sample=\d+ opens", joined)
    # A recording that kept no per-token trainer log-probs says how to keep them.
    bare = tmp_path / "bare"
    record_with_stats(str(bare), steps=2, anomaly_at=1, incomplete=2)
    assert main(["mismatch", str(bare), "--top", "3"]) == 4
    assert "debug.record_trainer_logp=true" in capsys.readouterr().out


@pytest.mark.areal
def test_a_log_prob_spike_at_one_step_shows_there_and_nowhere_else(
    sc_d2, tmp_path, capsys
):
    """The CPU server of the single-controller recording reported a quarter of
    step 1's sampled log-probs 4 nats low (its --logprob-fault, by weight
    version: step 1's rollouts are generated after one weight update). The
    step's mismatch jumps, the anomaly threshold pins it, ``mismatch --top``
    lists its tokens first and the report page marks it; the other steps are
    clean."""
    reader = RecordingReader(sc_d2.path)
    assert "Injecting a log-prob fault" in (sc_d2.workdir / "server.log").read_text()
    # The weight version the server counted is the one AReaL recorded.
    versions = reader.load_shard(SC_SPIKE_STEP, 0)[0]["versions"]
    assert int(versions.max()) == SC_SPIKE_STEP
    for step in range(SC_STEPS):
        stats = reader.recorded_stats(step)
        if step == SC_SPIKE_STEP:
            # The hit tokens: d = trainer - engine = +4 nats, give or take the
            # clean gap (tenths of a nat at most: another attention kernel).
            assert stats[ABS_MAX] == pytest.approx(SC_SPIKE_NATS, abs=0.5)
            assert stats[mismatch.stat_name("k1", "min")] < -SC_SPIKE_NATS + 0.5
            assert 0.1 < stats[mismatch.stat_name("over_log2")] < 0.45
        else:
            assert stats[ABS_MAX] < 0.5, (step, stats[ABS_MAX])
            assert stats[mismatch.stat_name("over_log2")] == 0
    # The flight recorder's anomaly rule: that step fired, and is pinned (the
    # other anomaly is the refused rollouts', tests/test_demo.py).
    fired = {a.step: a for a in anomalies(reader)}
    assert sorted(fired) == sorted({SC_SPIKE_STEP, SC_REFUSED_STEP})
    assert fired[SC_SPIKE_STEP].reasons[0].startswith(SC_SPIKE_THRESHOLD)
    assert SC_SPIKE_STEP in pinned_steps(reader)
    # The worst tokens of the whole recording are all the spike's.
    rc, worst = run_json(capsys, "mismatch", sc_d2.path, "--top", "5")
    assert rc == 0 and len(worst["tokens"]) == 5
    for token in worst["tokens"]:
        assert token["step"] == SC_SPIKE_STEP
        assert token["delta"] == pytest.approx(SC_SPIKE_NATS, abs=0.5)
    # The report page: the step's mismatch point and its anomaly.
    page = tmp_path / "spike.html"
    html_report.build_report(sc_d2.path, None, str(page), max_per_step=0)
    data = page_data(page)
    assert SC_SPIKE_STEP in [a["step"] for a in data["anomalies"]]
    assert SC_SPIKE_STEP in data["pinned"]
    series = {
        int(s): v.get(mismatch.stat_name("abs_diff")) for s, v in data["series"].items()
    }
    spike = series.pop(SC_SPIKE_STEP)
    assert spike > 10 * max(series.values()), (spike, series)


def test_the_ratio_tails_and_nonfinite_share_are_arealss_definitions():
    """|d| > log c for c in 1.5, 2, 3, 5, 10 (AReaL's ratio_outside_<c>), and the
    share of loss tokens whose log-prob is not finite."""
    d = torch.tensor([0.1, -0.5, 0.8, -1.2, 2.0, 3.0, float("inf"), 9.0])
    loss = torch.tensor([True] * 7 + [False])
    s = mismatch.token_stats(d, loss)
    for c in mismatch.TAILS:
        expected = [float(abs(x) > math.log(float(c))) for x in d[:6].tolist()]
        assert s[f"over_log{c}"][:6].tolist() == expected, c
    assert s["nonfinite"].tolist() == [0.0] * 6 + [1.0, 0.0]
    assert set(mismatch.NAMES) >= {f"over_log{c}" for c in ("1.5", "3", "10")}


def _areal_train_infer(d: torch.Tensor) -> dict[str, float]:
    """What AReaL's log_train_inference_stats (main after 2.1.0, #1736) commits for
    loss tokens with these d, from its definitions, in float64. Synthetic: no
    AReaL build we can install has it."""
    d = d.double()
    out = {
        "n_valid_tokens": float(d.numel()),
        "logp_abs_diff/avg": float(d.abs().mean()),
        "logp_abs_diff/max": float(d.abs().max()),
        "kl_k1": float((-d).mean()),
        "kl_k2": float((d * d / 2).mean()),
        "kl_k3": float((torch.expm1(d) - d).mean()),
        "nonfinite_logp_fraction": 0.0,
    }
    for c in mismatch.TAILS:
        out[f"ratio_outside_{c}"] = float(
            (d.abs() > math.log(float(c))).double().mean()
        )
    return {f"ppo_actor/train_infer/{k}": v for k, v in out.items()}


def _areal_published(trainer_logp, rollout_logp, mask) -> dict[str, float]:
    """AReaL's ppo_actor/train_infer statistics of next-token-aligned inputs by
    their published definition (areal/trainer/ppo/stats.py
    ``log_train_inference_stats`` after #1736, in the search index's file
    versions): float64; delta = trainer - rollout on the mask (0 off it);
    n_valid_tokens the masked count; logp_abs_diff avg/min/max, kl_k1 -delta,
    kl_k2 delta^2/2, kl_k3 expm1(delta)-delta, nonfinite_logp_fraction and
    ratio_outside_<c> (|delta| > log c, NaN where a log-prob is not finite)
    averaged over the masked tokens. Written here from that definition, not
    from our code."""
    mask = mask.bool()
    t, r = trainer_logp.double(), rollout_logp.double()
    finite = torch.isfinite(t) & torch.isfinite(r)
    delta = torch.where(mask, t - r, torch.zeros_like(t))

    def avg(x):
        return float(x[mask].mean())

    out = {
        "n_valid_tokens": float(mask.sum()),
        "logp_abs_diff/avg": avg(delta.abs()),
        "logp_abs_diff/min": float(delta.abs()[mask].min()),
        "logp_abs_diff/max": float(delta.abs()[mask].max()),
        "kl_k1": avg(-delta),
        "kl_k2": avg(delta.square() / 2),
        "kl_k3": avg(delta.expm1() - delta),
        "nonfinite_logp_fraction": avg((~finite).double()),
    }
    for c in mismatch.TAILS:
        outside = (delta.abs() > math.log(float(c))).double()
        out[f"ratio_outside_{c}"] = avg(torch.where(finite, outside, float("nan")))
    return {f"ppo_actor/train_infer/{k}": v for k, v in out.items()}


def _arealss_train_infer(trainer_logp, rollout_logp, mask) -> dict[str, float]:
    """AReaL's own code where the installed build has it (main after 2.1.0),
    exported by its own tracker; its published definition otherwise."""
    try:
        from areal.trainer.ppo.stats import log_train_inference_stats
    except ImportError:
        return _areal_published(trainer_logp, rollout_logp, mask)
    from areal.utils import stats_tracker

    stats_tracker.export_all(reset=True)
    log_train_inference_stats(trainer_logp, rollout_logp, mask)
    exported = stats_tracker.export_all(reset=True)
    return {k: v for k, v in exported.items() if k.startswith("ppo_actor/train_infer/")}


def _a_step_as_the_trainer_sees_it(seed: int):
    """Three sequences of two samples: prompt tokens outside the loss mask, the
    engine's log-prob of token t at position t, and the trainer's recomputed
    log-probs next-token aligned (position t: token t+1), 0.1-0.5 nats apart."""
    gen = torch.Generator().manual_seed(seed)
    trajectories, trainer = [], []
    for _ in range(3):
        engine = -torch.rand(2, 12, generator=gen) * 3
        loss_mask = torch.zeros(2, 12, dtype=torch.int32)
        loss_mask[:, 4:11] = 1
        engine = engine * loss_mask
        noise = (torch.rand(2, 12, generator=gen) - 0.5) * 0.8
        trainer.append(torch.roll(engine, -1, dims=-1) + noise)
        trajectories.append({"logprobs": engine, "loss_mask": loss_mask})
    return trajectories, trainer


def _as_arealss_actor_aligns_them(trajectories, trainer):
    """PPOActor's next-token alignment (trainer/ppo/actor.py: the rollout
    log-probs and the loss mask rolled by -1) over the whole batch."""
    rollout = torch.cat([torch.roll(t["logprobs"], -1, dims=-1) for t in trajectories])
    mask = torch.cat([torch.roll(t["loss_mask"], -1, dims=-1) for t in trajectories])
    return torch.cat(trainer), rollout, mask


def test_arealss_train_infer_statistics_agree_with_ours_and_a_planted_shift_does_not():
    """Ours measured by our recording path (mismatch.record into AReaL's own
    stats tracker, exported as a step commits them); AReaL's by its own code where
    a build has it, else its published definition, from the inputs it is given.
    They agree to float noise on all twelve pairs; AReaL's given the rollout
    log-probs without the shift (a planted misalignment) disagrees, and the
    summary names it."""
    from areal.utils import stats_tracker

    from areal_debug.stages import train_infer

    trajectories, trainer = _a_step_as_the_trainer_sees_it(0)
    stats_tracker.export_all(reset=True)
    assert mismatch.record(trajectories, trainer)
    ours = stats_tracker.export_all(reset=True)
    t, r, mask = _as_arealss_actor_aligns_them(trajectories, trainer)
    pairs = train_infer.pairs_of_stats({**ours, **_arealss_train_infer(t, r, mask)})
    assert len(pairs) == 12, pairs
    assert [p.areal for p in pairs if not p.agrees] == [], pairs
    assert "agree with ours at 1 step(s)" in train_infer.summary({0: pairs})

    # A replay's report sets them beside ours on each replayed step too.
    from areal_debug.compare.report import ReplayReport, StepComparison, TopologyChange

    step = {**ours, **_arealss_train_infer(t, r, mask)}
    report = ReplayReport(
        "rec",
        0.0,
        0.0,
        TopologyChange("spmd", "spmd", 1, 1, 1, 1),
        [StepComparison(0, "identical", {k: {"replayed": v} for k, v in step.items()})],
    )
    assert report.to_json()["summary"]["train_infer"] == (
        "AReaL's own ppo_actor/train_infer statistics agree with ours at 1 step(s) "
        "(to float noise: ours float32, AReaL's float64)."
    )

    unshifted = torch.cat([t["logprobs"] for t in trajectories])
    planted = train_infer.pairs_of_stats(
        {**ours, **_arealss_train_infer(t, unshifted, mask)}
    )
    apart = [p.areal for p in planted if not p.agrees]
    assert "logp_abs_diff/avg" in apart and "kl_k3" in apart, planted
    assert "differ from ours beyond float noise at step 3" in train_infer.summary(
        {3: planted}
    )


def _ours(d: torch.Tensor) -> dict[str, float]:
    """Ours as AReaL's tracker reduces them (avg, min, max over the loss tokens)."""
    mask = torch.ones_like(d, dtype=torch.bool)
    out = {TOKENS: float(d.numel())}
    for name, values in mismatch.token_stats(d.float(), mask).items():
        out[mismatch.stat_name(name, "avg")] = float(values.double().mean())
        out[mismatch.stat_name(name, "min")] = float(values.min())
        out[mismatch.stat_name(name, "max")] = float(values.max())
    return out


def test_arealss_own_mismatch_statistics_are_set_beside_ours(tmp_path, capsys):
    """A step carrying AReaL's ppo_actor/train_infer/*: `mismatch` sets them beside
    ours, says they agree to float noise, and names the first that does not."""
    from test_cli_inspect import manifest, traj, write_manifest

    from areal_debug.recording.writer.recording_writer import RecordingWriter

    rec = str(tmp_path / "rec")
    write_manifest(rec, manifest())
    w = RecordingWriter(rec, shard=0, num_shards=1, steps_per_epoch=10)
    gen = torch.Generator().manual_seed(0)
    for step in range(3):
        d = torch.randn(4000, generator=gen, dtype=torch.float64) * 0.3
        stats = {**_ours(d), **_areal_train_infer(d)}
        if step == 2:  # another mask or recompute on AReaL's side: a real gap
            stats["ppo_actor/train_infer/kl_k3"] *= 1.5
        w.submit_batch(step, [traj(step)])
        w.submit_stats(step, stats)
    w.close()
    rc, rows = run_json(capsys, "mismatch", rec)
    assert rc == 0
    pairs = {(p["ours"], p["areal"]): p for p in rows[0]["areal"]}
    assert len(pairs) == 12  # tokens, |d| avg and max, k1-k3, 5 tails, non-finite
    assert all(p["agrees"] for p in pairs.values()), pairs
    apart = [p["areal"] for p in rows[2]["areal"] if not p["agrees"]]
    assert apart == ["kl_k3"]
    assert main(["mismatch", rec, "--steps", "0-1"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "AReaL's own ppo_actor/train_infer statistics agree with ours at 2" in text
    assert main(["mismatch", rec]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "differ from ours beyond float noise at step 2: kl_k3" in text
    # The page says it too.
    out = tmp_path / "page.html"
    assert main(["report", rec, "-o", str(out)]) == 0
    notes = page_data(out)["notes"]
    assert any(
        "differ from ours beyond float noise at step 2: kl_k3" in n for n in notes
    )


@pytest.mark.areal
def test_top_finds_a_planted_token_in_a_two_rank_recording(spmd_d2, tmp_path, capsys):
    """Recorded on two ranks, each keeping its half of the trainer's log-probs in
    AReaL's order: a token planted in the second head's shard is named at its
    place in the step's batch."""
    copy = tmp_path / "rec"
    shutil.copytree(spmd_d2.path, copy)
    rewrite_payload(str(copy), 0, 1, plant)
    assert_top_finds_the_plant(copy, capsys)
