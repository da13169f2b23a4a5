# SPDX-License-Identifier: Apache-2.0
"""Stage digests and their comparison, without a trainer, and the walk of a step's
update mini-batch by mini-batch in real AReaL runs (``areal``; the other real-AReaL
runs that record and compare them are in tests/test_reproduce.py and
tests/test_areal_spmd.py)."""

from __future__ import annotations

import json

import pytest
import torch

from areal_debug.compare.report import ReplayReport, TopologyChange
from areal_debug.compare.stages import compare_stages, describe
from areal_debug.compare.statistics import StatsComparison
from areal_debug.recording.format import STAGES_FILE, RecordingError
from areal_debug.stages.digest import digest_hex, digest_pair
from areal_debug.stages.names import (
    TOKEN_STAGES,
    StageKeyError,
    StageTensorKey,
    trajectory_index,
    trajectory_name,
)
from areal_debug.stages.record import StageRecord
from areal_debug.stages.stage_log import StageLog, merge_global


def hexof(t: torch.Tensor, offset: int = 0) -> str:
    return digest_hex(digest_pair(t, offset))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64]
)
def test_one_changed_bit_or_one_swap_changes_the_digest(dtype):
    t = (torch.randn(64, 33) * 100).to(dtype)
    flipped = t.clone()
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    flipped.view(-1).view(ints)[17] ^= 1  # the lowest bit of one element
    assert hexof(flipped) != hexof(t)
    swapped = t.clone()
    swapped[3, 4], swapped[3, 5] = t[3, 5].clone(), t[3, 4].clone()
    assert not torch.equal(t[3, 4], t[3, 5])
    assert hexof(swapped) != hexof(t)
    assert hexof(t.clone()) == hexof(t)


def test_shards_sum_to_the_whole_tensors_digest():
    # What lets each data-parallel rank digest only its shard.
    t = torch.randn(1001, 7)
    whole = digest_pair(t)
    parts = digest_pair(t[:300], 0) + digest_pair(t[300:700], 300 * 7)
    parts += digest_pair(t[700:], 700 * 7)
    assert digest_hex(parts) == digest_hex(whole)
    logs = []
    for rows, offset in ((t[:500], 0), (t[500:], 500 * 7)):
        log = StageLog()
        log.add("weights", "w", rows, offset=offset)
        log.add("grads", "w", rows, offset=offset, norm=True)
        logs.append(log.to_host())
    merged = merge_global(logs)
    assert merged["global"]["weights"]["w"][0] == digest_hex(whole)
    norm = merged["global"]["grads"]["w"][1]
    assert norm == pytest.approx(float(t.double().norm()), rel=1e-12)


def test_large_tensors_are_digested_in_chunks_exactly(monkeypatch):
    from areal_debug.stages import digest as stage_digest

    t = torch.randn(10_000)
    whole = hexof(t)
    monkeypatch.setattr(stage_digest, "_CPU_CHUNK", 333)
    assert hexof(t) == whole
    # As on an accelerator (its chunk size), the same digest.
    monkeypatch.setattr(stage_digest, "_on_cpu", lambda device: False)
    monkeypatch.setattr(stage_digest, "_CHUNK", 333)
    assert hexof(t) == whole


def _log(loss: float, logp: torch.Tensor, weight: torch.Tensor) -> dict:
    log = StageLog(keep=frozenset(TOKEN_STAGES))
    log.add("logp", "trajectory 0", logp)
    log.add("loss", "mini-batch 0 micro-batch 0", torch.tensor(loss), value=True)
    log.add("weights", "model.layers.0.mlp.up_proj.weight", weight)
    host = log.to_host()
    tensors = StageRecord(host, log.tensors).keyed_tensors(0)
    return merge_global([host]), tensors


def test_first_divergent_stage_is_the_earliest_in_step_order():
    logp, w = torch.randn(12), torch.randn(4, 4)
    rec, rec_t = _log(0.5, logp, w)
    same, _ = _log(0.5, logp, w)
    stages = compare_stages(rec, same, True)
    assert {s: r["status"] for s, r in stages.items()} == {
        "logp": "identical",
        "loss": "identical",
        "weights": "identical",
    }
    # Only the weights differ: still not identical, and located.
    moved, _ = _log(0.5, logp, w + 1e-3)
    stages = compare_stages(rec, moved, True)
    assert stages["weights"]["where"] == "model.layers.0.mlp.up_proj.weight"
    assert [s for s, r in stages.items() if r["status"] == "differs"] == ["weights"]
    # A log-prob changes at token 7: the logp stage, by how much and where.
    changed = logp.clone()
    changed[7] += 0.25
    diverged, rep_t = _log(0.75, changed, w + 1e-3)
    stages = compare_stages(rec, diverged, True, rec_t, rep_t)
    assert stages["logp"]["status"] == "differs"
    assert stages["logp"]["position"] == [7]
    assert stages["logp"]["max_abs_diff"] == pytest.approx(0.25, rel=1e-6)
    assert stages["loss"]["abs_diff"] == pytest.approx(0.25)
    line = describe(3, stages)
    assert line.startswith("step 3: logp differs first at trajectory 0")
    assert "loss differs first at mini-batch 0 micro-batch 0" in line


def test_a_step_whose_weights_differ_is_not_reported_identical():
    logp, w = torch.randn(5), torch.randn(3)
    rec, _ = _log(0.5, logp, w)
    rep, _ = _log(0.5, logp, w * 2)
    comparison = StatsComparison(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    )
    stats = {"ppo_actor/update/actor_loss/avg": 0.1}
    entry = comparison.add(0, stats, dict(stats), {}, compare_stages(rec, rep, True))
    assert entry.status == "diverged"
    report = comparison.report.to_json()
    assert report["summary"]["all_identical"] is False
    first = report["first_divergence"]
    assert (first["step"], first["stage"]) == (0, "weights")
    # The report reads back with the stages, and the stage order survives JSON.
    again = ReplayReport.from_json(json.loads(json.dumps(report, sort_keys=True)))
    assert again.first_stage_divergence()["stage"] == "weights"
    lines = comparison.summary_lines()
    assert (
        "First divergent stage: weights at step 0 (model.layers.0.mlp.up_proj.weight)."
        in lines
    )
    assert not any(line.startswith("Every stage identical") for line in lines)


def test_only_statistics_diverging_is_the_stats_stage():
    comparison = StatsComparison(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    )
    comparison.add(0, {"a": 1.0}, {"a": 2.0})
    first = comparison.report.to_json()["first_divergence"]
    assert (first["stage"], first["where"]) == ("stats", "a")


def test_the_summary_prints_no_inf_and_no_false_all_clear():
    """A metric recorded 0 has no relative difference: the summary says so, not
    "inf"; a replay stopped before any step (another model, fail_on_divergence)
    does not say its "0 replayed steps match the recording"."""
    comparison = StatsComparison(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    )
    comparison.add(0, {"a": 0.0}, {"a": 2.0})
    text = "\n".join(comparison.summary_lines())
    assert "inf" not in text and "recorded 0" in text, text
    stopped = StatsComparison(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    )
    stopped.report.model = {"status": "differs", "where": "lm_head.weight"}
    lines = stopped.summary_lines()
    assert not any(line.startswith("No divergence") for line in lines), lines
    assert lines[-1] == (
        "No step was replayed to its end, so none was compared: the model is not "
        "the recorded one (above)."
    )


def test_a_step_without_an_advantages_stage_reports_it_absent_never_diverged():
    """AReaL's pure-distillation (MOPD, #1592, merged after main @cbff54d) route
    skips _compute_advantages: such a step has no advantages stage on either side.
    Synthetic: no AReaL build we can install has MOPD; the stage logs are what the
    probes write for a step whose compute_advantages never ran."""
    logp, w = torch.randn(6), torch.randn(3)
    rec, _ = _log(0.5, logp, w)
    rep, _ = _log(0.5, logp, w)
    stages = compare_stages(rec, rep, True)
    assert "advantages" not in stages
    assert {r["status"] for r in stages.values()} == {"identical"}
    assert "advantages" not in describe(0, stages)
    comparison = StatsComparison(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    )
    stats = {"ppo_actor/update/actor_loss/avg": 0.1}
    assert comparison.add(0, stats, dict(stats), {}, stages).status == "identical"
    # Where only the recording ran it, the replay skipped a stage: that differs.
    log = StageLog()
    log.add("advantages", "trajectory 0 advantages", torch.randn(6))
    with_adv = merge_global([log.to_host()])
    rec["ranks"][0]["advantages"] = with_adv["ranks"][0]["advantages"]
    stages = compare_stages(rec, rep, True)
    assert stages["advantages"]["status"] == "differs"
    assert stages["advantages"]["missing_in"] == "replay"


def test_per_rank_stages_are_not_compared_across_layouts():
    logp, w = torch.randn(5), torch.randn(3)
    rec, _ = _log(0.5, logp, w)
    stages = compare_stages(rec, rec, same_layout=False)
    assert stages["logp"]["status"] == "not_compared"
    assert stages["weights"]["status"] == "identical"


def test_stages_round_trip_through_the_recording_and_damage_is_named(tmp_path):
    import os

    from test_store import manifest, traj

    from areal_debug.recording.format import (
        STAGE_TENSORS,
        Codec,
        stage_tensors_name,
        step_dirname,
    )
    from areal_debug.recording.reader import RecordingReader
    from areal_debug.recording.writer.recording_writer import RecordingWriter
    from areal_debug.recording.writer.start import write_manifest

    path = str(tmp_path / "rec")
    write_manifest(path, manifest())
    writer = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    writer.submit_batch(0, [traj(0)])
    stages, tensors = _log(0.5, torch.randn(6), torch.randn(2))
    writer.submit_stages(0, stages, tensors)
    writer.close()
    got, got_tensors = RecordingReader(path).recorded_stages(0)
    assert {k: got[k] for k in stages} == stages
    assert torch.equal(
        got_tensors["rank 0/logp/trajectory 0"], tensors["rank 0/logp/trajectory 0"]
    )
    assert RecordingReader(path).recorded_stages(1) == (None, None)

    step_dir = os.path.join(path, step_dirname(0))
    # Through the recording's codec (zstd by default), named in stages.json.
    name = stage_tensors_name(Codec.ZSTD)
    assert sorted(os.listdir(step_dir)).count(name) == 1
    assert STAGE_TENSORS not in os.listdir(step_dir)
    with open(os.path.join(step_dir, name), "r+b") as f:
        f.seek(-3, 2)
        f.write(b"\x00\x01\x02")
    with pytest.raises(RecordingError, match=f"Checksum mismatch in .*{name}"):
        RecordingReader(path).recorded_stages(0)
    # A name in stages.json that leaves the step's directory is refused.
    with open(os.path.join(step_dir, STAGES_FILE)) as f:
        body = json.load(f)
    with open(os.path.join(step_dir, STAGES_FILE), "w") as f:
        json.dump({**body, "tensors_file": "../../manifest.json"}, f)
    with pytest.raises(RecordingError):
        RecordingReader(path).recorded_stages(0)
    with open(os.path.join(step_dir, STAGES_FILE), "w") as f:
        json.dump({"ranks": "not a list", "global": {}}, f)
    with pytest.raises(RecordingError, match=f"{STAGES_FILE} must hold 'ranks'"):
        RecordingReader(path).recorded_stages(0)


def test_many_tensors_at_once_digest_as_one_at_a_time(monkeypatch):
    from areal_debug.stages import digest as stage_digest
    from areal_debug.stages.digest import digest_pairs

    tensors = [
        torch.randn(5, 3),
        torch.randn(0),
        torch.randn(100).bfloat16(),
        torch.randn(7).double(),
        torch.tensor([True, False]),
        torch.randn(40),
    ]
    offsets = [0, 0, 3, 10, 0, 17]
    one_by_one = torch.stack([digest_pair(t, o) for t, o in zip(tensors, offsets)])
    assert torch.equal(digest_pairs(tensors, offsets), one_by_one)
    # The segment sums an accelerator takes, run here: the same digests.
    monkeypatch.setattr(stage_digest, "_on_cpu", lambda device: False)
    assert torch.equal(digest_pairs(tensors, offsets), one_by_one)
    # Groups cut at the chunk size, and a tensor larger than a chunk alone.
    monkeypatch.setattr(stage_digest, "_CHUNK", 20)
    assert torch.equal(digest_pairs(tensors, offsets), one_by_one)


def test_sums_of_squares_agree_on_either_path(monkeypatch):
    from areal_debug.stages import digest as stage_digest

    tensors = [torch.randn(5, 3), torch.randn(0), torch.randn(100).bfloat16()]
    exact = [float(t.double().pow(2).sum()) for t in tensors]
    # float64 on the CPU; float32 accumulation on an accelerator.
    for on_cpu, rel in ((True, 1e-12), (False, 1e-6)):
        monkeypatch.setattr(stage_digest, "_on_cpu", lambda device: on_cpu)
        got = [float(v) for v in stage_digest.sums_of_squares(tensors)]
        assert got == pytest.approx(exact, rel=rel)


def _extreme_tensors() -> list[torch.Tensor]:
    """Bit patterns at the limits of the row sums' exactness (the largest
    magnitudes of each width), sizes around a row and a chunk."""
    g = torch.Generator().manual_seed(3)
    ints = torch.randint(-(2**31), 2**31 - 1, (5000,), generator=g, dtype=torch.int32)
    return [
        torch.full((3000,), -(2**31), dtype=torch.int32).view(torch.float32),
        torch.full((1 << 14,), 2**31 - 1, dtype=torch.int32).view(torch.float32),
        ints.view(torch.float32),  # NaNs, infinities, -0.0 among them
        torch.full((1025,), -(2**15), dtype=torch.int16).view(torch.bfloat16),
        torch.randn(4099, generator=g).half(),
        torch.tensor(float("nan")),
        torch.randn(700, generator=g).double(),
        torch.ones(1023, dtype=torch.bool),
        torch.full((1024,), 255, dtype=torch.uint8),
        torch.randn(0),
    ]


@pytest.mark.parametrize("chunk", [1 << 24, 3000, 1024])
def test_an_accelerators_row_sums_are_the_element_sums_bit_for_bit(monkeypatch, chunk):
    from areal_debug.stages import digest as stage_digest
    from areal_debug.stages.digest import digest_pairs

    tensors = _extreme_tensors()
    # Offsets near 2**63: the index products wrap.
    offsets = [2**62 + 977 * i for i in range(len(tensors))]
    on_cpu = [digest_pair(t, o) for t, o in zip(tensors, offsets)]
    monkeypatch.setattr(stage_digest, "_on_cpu", lambda device: False)
    monkeypatch.setattr(stage_digest, "_CHUNK", chunk)
    for t, o, expected in zip(tensors, offsets, on_cpu):
        assert torch.equal(digest_pair(t, o), expected), t.dtype
    assert torch.equal(digest_pairs(tensors, offsets), torch.stack(on_cpu))


def test_a_small_tensor_is_digested_as_it_was_when_added():
    # Small tensors (a micro-batch's loss) wait for the step's end as a copy.
    loss = torch.tensor(0.25)
    log = StageLog()
    log.add("loss", "mini-batch 0 micro-batch 0", loss, value=True)
    expected = [hexof(torch.tensor(0.25)), 0.25]
    loss.add_(1.0)  # the caller reuses its tensor
    for i in range(1, 4):  # each name keeps its own tensor's digest and value
        log.add(
            "loss", f"mini-batch 0 micro-batch {i}", torch.tensor(i / 8), value=True
        )
    host = log.to_host()["loss"]
    assert host["mini-batch 0 micro-batch 0"] == expected
    for i in range(1, 4):
        t = torch.tensor(i / 8)
        assert host[f"mini-batch 0 micro-batch {i}"] == [hexof(t), i / 8]


def test_the_latest_digest_of_a_name_wins_whether_small_or_not():
    small, large = torch.randn(3), torch.randn(10_000)
    log = StageLog()
    log.add("weights", "w", small)
    log.add_many("weights", [("w", large, 0)])
    log.add("grads", "g", large, norm=True)
    log.add("grads", "g", small, norm=True)
    other = StageLog()
    other.add("loss", "l", torch.tensor(2.0), value=True)  # waiting when adopted
    log.adopt(other)
    host = log.to_host()
    assert host["weights"]["w"][:2] == list(digest_pair(large).tolist())
    assert host["grads"]["g"][:2] == list(digest_pair(small).tolist())
    assert host["grads"]["g"][2] == pytest.approx(float(small.double().pow(2).sum()))
    assert host["loss"]["l"] == [hexof(torch.tensor(2.0)), 2.0]


def test_a_steps_log_reads_the_same_on_an_accelerators_path(monkeypatch):
    # Everything a step logs (blocks of mixed dtypes, float64 among them, small
    # tensors waiting for the step's end, a log adopted), through the
    # accelerator's row sums and the CPU's element sums: the same digests, and
    # magnitudes within float32 accumulation.
    from areal_debug.stages import digest as stage_digest

    g = torch.Generator().manual_seed(5)

    def log() -> dict:
        out = StageLog()
        weights = [
            ("mini-batch 0 a", torch.randn(3000, generator=g).bfloat16(), 0),
            ("mini-batch 0 b", torch.randn(70, generator=g).double(), 11),
            ("mini-batch 0 c", torch.randn(5000, generator=g), 2**40),
        ]
        out.add_many("weights", weights)
        out.add_many("grads", weights, norm=True)
        for i in range(3):
            out.add(
                "loss",
                f"mini-batch 0 micro-batch {i}",
                torch.tensor(0.5 + i),
                value=True,
            )
        alone = StageLog()
        alone.add_many("model", weights)
        alone.to_host()
        out.adopt(alone)
        return out.to_host()

    on_cpu = log()
    g.manual_seed(5)
    monkeypatch.setattr(stage_digest, "_on_cpu", lambda device: False)
    on_accelerator = log()
    assert on_accelerator.keys() == on_cpu.keys()
    for stage, names in on_cpu.items():
        for name, expected in names.items():
            got = on_accelerator[stage][name]
            assert got[:-1] == expected[:-1], (stage, name)
            assert got[-1] == pytest.approx(expected[-1], rel=1e-6), (stage, name)


class _DeviceOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the operators that launch work on a device (views launch none)."""

    VIEWS = {"view", "detach", "select", "slice", "unbind", "alias", "_unsafe_view"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in self.VIEWS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_an_accelerator_digests_a_models_weights_in_kernels_per_block_not_per_tensor():
    # A launch costs tens of microseconds: one set per tensor made the digests a
    # second of a 1.5B-parameter model's step on an H200. Meta tensors take the
    # accelerator's path and count its operators without computing anything.
    shapes = [(151936, 1536)] + [(1536, 1536), (256, 1536), (256,), (1536,)] * 60
    params = [torch.empty(s, device="meta", dtype=torch.bfloat16) for s in shapes]
    blocks = -(-sum(p.numel() for p in params) // (1 << 24))
    log = StageLog()
    with _DeviceOps() as ops:
        log.add_many(
            "grads", [(f"p{i}", p, 0) for i, p in enumerate(params)], norm=True
        )
    # 241 tensors in 24 blocks of 16 M elements.
    assert ops.count <= 4 * blocks + 24 < len(params), (ops.count, blocks)
    with _DeviceOps() as ops:
        for i in range(64):
            log.add(
                "loss", f"micro-batch {i}", torch.ones((), device="meta"), value=True
            )
        log._digest_small()
    assert ops.count <= 2 * 64 + 24, ops.count


def test_a_failing_digest_never_reaches_the_training_step():
    from areal_debug.stages.probes import StageProbes

    probes = StageProbes()
    # A value that is not a tensor is passed through, not digested.
    wrapped = probes._advantages(lambda: [{"advantages": "not a tensor"}])
    assert wrapped() == [{"advantages": "not a tensor"}]

    def boom():
        raise RuntimeError("device lost")

    probes._digest("grads", boom)
    assert probes.failed == "grads: RuntimeError('device lost')"
    # From then on nothing is digested and the step hands over no digests.
    assert probes.take() == StageRecord(None, {}, 0.0, None)


@pytest.mark.parametrize(
    "text",
    [
        "rank 0/logp/trajectory 0",
        "rank 12/advantages/trajectory 3 returns",
        "rank 1/weights/model.layers.0/odd name",  # the name may hold a '/'
    ],
)
def test_stage_tensor_keys_round_trip_the_recorded_strings(text):
    key = StageTensorKey.parse(text)
    assert str(key) == key.format() == text
    assert StageTensorKey(key.rank, key.stage, key.name) == key


def test_stage_tensor_key_fields_are_named():
    key = StageTensorKey.parse("rank 3/ref_logp/trajectory 7")
    assert (key.rank, key.stage, key.name) == (3, "ref_logp", "trajectory 7")
    assert trajectory_index(key.name) == 7 and trajectory_name(7) == key.name
    assert trajectory_index("mini-batch 0 micro-batch 1") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "logp/trajectory 0",
        "rank 0/logp",
        "rank 0//trajectory 0",
        "rank 0/logp/",
        "rank -1/logp/trajectory 0",
        "rank 01/logp/trajectory 0",
        "rank x/logp/trajectory 0",
        "Rank 0/logp/trajectory 0",
        "rank ２/logp/trajectory 0",
        3,
    ],
)
def test_a_malformed_stage_tensor_key_is_refused_with_the_form_expected(text):
    with pytest.raises(StageKeyError, match="expected 'rank R/<stage>/<name>'"):
        StageTensorKey.parse(text)


def test_a_stage_tensor_key_that_could_not_be_parsed_back_is_not_built():
    for rank, stage, name in [(-1, "logp", "t"), (0, "a/b", "t"), (0, "logp", "")]:
        with pytest.raises(StageKeyError):
            StageTensorKey(rank, stage, name)
    with pytest.raises(StageKeyError, match="is an int"):
        StageTensorKey("0", "logp", "t")


def test_stage_records_of_one_rank_unite_its_engines():
    actor = StageRecord(
        {"logp": {"t": ["a", None]}}, {("logp", "t"): torch.ones(2)}, 1.0
    )
    ref = StageRecord({"ref_logp": {"t": ["b", None]}}, {}, 0.5, ref_forwards=3)
    both = StageRecord.empty().union(actor).union(ref)
    assert both.digests == {"logp": {"t": ["a", None]}, "ref_logp": {"t": ["b", None]}}
    assert (both.seconds, both.ref_forwards) == (1.5, 3)
    assert list(both.keyed_tensors(2)) == ["rank 2/logp/t"]
    # One engine's digests failed: the rank has none, its counts still add up.
    failed = both.union(StageRecord(None, ref_forwards=1))
    assert failed.digests is None and failed.ref_forwards == 4
    with pytest.raises(AttributeError):
        both.seconds = 0.0  # frozen: a record is handed over, not edited


class FakeActor:
    """The actor engine's surface the probes wrap (STAGE_METHODS's names), training
    as AReaL's does: ppo_update runs one train_batch per mini-batch, each the
    losses of its micro-batches and then one optimizer_step (SGD at ``lr``);
    ``clip`` scales the loss as a changed eps_clip would."""

    def __init__(self, lr: float = 0.1, clip: float = 1.0, n_minibatches: int = 2):
        self.model = torch.nn.Linear(3, 2)
        with torch.no_grad():
            for i, p in enumerate(self.model.parameters()):
                p.copy_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape) / 7 + i)
        self.lr, self.clip, self.n_minibatches = lr, clip, n_minibatches

    def compute_logp(self, data):
        return [torch.full((2, 3), -0.5) for _ in data]

    def compute_advantages(self, data):
        return [{"advantages": torch.ones(2, 3), "returns": torch.zeros(2, 3)}]

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).pow(2).mean() * self.clip

    def train_batch(self, data, loss_fn):
        for micro in data:
            loss_fn(micro).backward()
        return self.optimizer_step()

    def optimizer_step(self):
        with torch.no_grad():
            for p in self.model.parameters():
                p -= self.lr * p.grad
                p.grad = None
        return {}

    def ppo_update(self, data):
        for mb in torch.tensor_split(data, self.n_minibatches):
            self.train_batch(mb.split(1), loss_fn=self.loss)


def probed_step(engine: FakeActor) -> dict:
    """One PPO step of ``engine`` with the probes on, as merge_global records it."""
    from areal_debug import areal_compat
    from areal_debug.stages.probes import StageProbes

    probes, patches = StageProbes(), areal_compat.MethodPatches()
    probes.install_engine("actor", engine, patches)
    batch = torch.linspace(-1, 1, 12).reshape(4, 3)
    engine.compute_logp([0])
    engine.compute_advantages([0])
    engine.ppo_update(batch)
    patches.remove_all()
    return merge_global([probes.take().digests])


def test_every_stage_method_is_probed_by_name_from_one_table():
    from areal_debug import areal_compat
    from areal_debug.stages.probes import StageProbes, stage_methods

    probes, patches, engine = StageProbes(), areal_compat.MethodPatches(), FakeActor()
    for role in ("actor", "ref", "critic"):
        for method in stage_methods(role):
            assert callable(probes._probe(method)), method
    assert set(stage_methods("actor")) == {
        *areal_compat.STAGE_METHODS["actor"],
        *areal_compat.STAGE_METHODS["actor_engine"],
    }
    probes.install_engine("actor", engine, patches)
    assert set(vars(engine)) - {"model", "lr", "clip", "n_minibatches"} == set(
        stage_methods("actor")
    )
    engine.compute_logp([0])
    engine.compute_advantages([0])
    engine.ppo_update(torch.ones(4, 3))
    digests = probes.take().digests
    assert list(digests) == ["logp", "advantages", "loss", "grads", "weights"]
    assert list(digests["loss"]) == [
        "mini-batch 0 micro-batch 0",
        "mini-batch 0 micro-batch 1",
        "mini-batch 1 micro-batch 0",
        "mini-batch 1 micro-batch 1",
    ]
    # Gradients and weights once per mini-batch: at its optimizer step.
    params = ["weight", "bias"]
    per_mini_batch = [f"mini-batch {mb} {p}" for mb in (0, 1) for p in params]
    assert list(digests["grads"]) == list(digests["weights"]) == per_mini_batch
    patches.remove_all()
    assert set(vars(engine)) == {"model", "lr", "clip", "n_minibatches"}
    with pytest.raises(
        NotImplementedError,
        match="names .generate., which no stage probe digests: add its probe to stages.probes._PROBES",
    ):
        probes._probe("generate")


def test_the_weights_are_digested_after_each_mini_batchs_optimizer_step():
    engine = FakeActor()
    weights = probed_step(engine)["global"]["weights"]
    # Mini-batch 1's are the weights after the update.
    for name, p in engine.model.named_parameters():
        assert weights[f"mini-batch 1 {name}"][0] == hexof(p)
    # Mini-batch 0's are those after its step alone.
    alone = FakeActor(n_minibatches=2)
    alone.train_batch(torch.linspace(-1, 1, 12).reshape(4, 3)[:2].split(1), alone.loss)
    for name, p in alone.model.named_parameters():
        assert weights[f"mini-batch 0 {name}"][0] == hexof(p)


@pytest.mark.parametrize("n_minibatches", [1, 2])
def test_a_changed_learning_rate_first_differs_at_the_weights_of_mini_batch_0(
    n_minibatches,
):
    # What issue #30 reported: with two mini-batches, the loss of mini-batch 1
    # differs too, but only after the weights of mini-batch 0 did.
    recorded = probed_step(FakeActor(lr=0.1, n_minibatches=n_minibatches))
    replayed = probed_step(FakeActor(lr=0.2, n_minibatches=n_minibatches))
    stages = compare_stages(recorded, replayed, True)
    assert stages["logp"]["status"] == stages["advantages"]["status"] == "identical"
    assert stages["weights"]["mini_batch"] == 0
    assert stages["weights"]["where"] == "mini-batch 0 weight"
    if n_minibatches == 2:
        assert (stages["loss"]["mini_batch"], stages["grads"]["mini_batch"]) == (1, 1)
        assert stages["loss"]["where"] == "mini-batch 1 micro-batch 0"
    else:
        assert stages["loss"]["status"] == stages["grads"]["status"] == "identical"
    report = _report(stages)
    first = report["first_divergence"]
    assert (first["step"], first["stage"], first["mini_batch"]) == (0, "weights", 0)
    assert first["where"] == "mini-batch 0 weight"
    line = describe(0, stages)
    before = "step 0: logp identical; advantages identical; "
    if n_minibatches == 1:
        before += "loss identical; grads identical; "
    assert line.startswith(before + "weights differ first at mini-batch 0 weight")
    if n_minibatches == 2:
        assert line.index("weights differ") < line.index("loss differs first at")


def test_a_changed_loss_still_first_differs_at_the_loss_of_mini_batch_0():
    recorded = probed_step(FakeActor())
    replayed = probed_step(FakeActor(clip=0.5))
    stages = compare_stages(recorded, replayed, True)
    first = _report(stages)["first_divergence"]
    assert (first["stage"], first["mini_batch"]) == ("loss", 0)
    assert first["where"] == "mini-batch 0 micro-batch 0"
    assert first["abs_diff"] > 0
    line = describe(0, stages)
    assert "advantages identical; loss differs first at mini-batch 0 micro-batch 0" in (
        line
    )
    assert line.index("loss differs") < line.index("gradient") < line.index("weights")


def _report(stages: dict) -> dict:
    comparison = StatsComparison(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1)
    )
    stats = {"ppo_actor/update/actor_loss/avg": 0.1}
    comparison.add(0, stats, dict(stats), {}, stages)
    report = comparison.report.to_json()
    # The walk order survives the report's JSON (whatever order its keys are in).
    again = ReplayReport.from_json(json.loads(json.dumps(report, sort_keys=True)))
    assert again.first_stage_divergence() == report["first_divergence"]
    return report


def _stage_dict(per_stage: dict[str, list[str]], changed: set[str] = frozenset()):
    """Digests by stage and name; the names in ``changed`` get another digest."""
    return {
        stage: {n: ["b" if n in changed else "a", None] for n in names}
        for stage, names in per_stage.items()
    }


def test_the_walk_interleaves_the_update_mini_batch_by_mini_batch():
    from areal_debug.stages.names import step_order

    update = {
        "loss": [f"mini-batch {mb} micro-batch 0" for mb in (0, 1, 2)],
        "grads": [f"mini-batch {mb} w" for mb in (0, 1, 2)],
        "weights": [f"mini-batch {mb} w" for mb in (0, 1, 2)],
    }

    def walked(changed: set[str]):
        rec = {"ranks": [{"logp": {"trajectory 0": ["a", None]}}], "global": {}}
        rep = json.loads(json.dumps(rec))
        for side, names in ((rec, set()), (rep, changed)):
            digests = _stage_dict(update, names)
            side["ranks"][0]["loss"] = digests.pop("loss")
            side["global"] = digests
            side["weights_per_mini_batch"] = True
        stages = compare_stages(rec, rep, True)
        return stages, step_order(stages)

    stages, order = walked({"mini-batch 2 w"})
    assert order[0] == "logp" and stages["grads"]["mini_batch"] == 2
    # Gradients and weights of mini-batch 2, the loss identical (at mini-batch 0).
    assert order == ["logp", "loss", "grads", "weights"]
    stages, order = walked({"mini-batch 1 micro-batch 0", "mini-batch 0 w"})
    assert order == ["logp", "grads", "weights", "loss"]
    assert first_stage_of(stages) == ("grads", 0, "mini-batch 0 w")
    stages, _ = walked(set())
    assert first_stage_of(stages) is None
    # A name only one side has differs where it falls in the step.
    rec = {"ranks": [], "global": {"grads": {"mini-batch 1 w": ["a", 1.0]}}}
    rep = {"ranks": [], "global": {"grads": {"mini-batch 1 w": ["b", 2.0]}}}
    rep["global"]["grads"]["mini-batch 0 w"] = ["a", 1.0]
    grads = compare_stages(rec, rep, True)["grads"]
    assert (grads["where"], grads["mini_batch"]) == ("mini-batch 0 w", 0)
    assert grads["missing_in"] == "recording" and grads["differing"] == 2


def first_stage_of(stages):
    from areal_debug.compare.stages import first_divergent_stage

    stage = first_divergent_stage(stages)
    if stage is None:
        return None
    return stage, stages[stage].get("mini_batch"), stages[stage]["where"]


def test_the_rank_whose_loss_differs_in_the_earliest_mini_batch_is_named():
    names = [f"mini-batch {mb} micro-batch 0" for mb in (0, 1)]
    rec = {"ranks": [{"loss": _stage_dict({"l": names})["l"]}] * 2, "global": {}}
    rep = {
        "ranks": [
            {"loss": _stage_dict({"l": names}, {names[1]})["l"]},
            {"loss": _stage_dict({"l": names}, {names[0]})["l"]},
        ],
        "global": {},
    }
    loss = compare_stages(rec, rep, True)["loss"]
    assert (loss["rank"], loss["mini_batch"]) == (1, 0)
    assert loss["where"] == "rank 1 mini-batch 0 micro-batch 0"
    assert loss["differing"] == 2


def test_mini_batch_names_round_trip():
    from areal_debug.stages.names import mini_batch_name, split_mini_batch

    assert mini_batch_name(3, "model.embed.weight") == "mini-batch 3 model.embed.weight"
    assert split_mini_batch("mini-batch 3 model.embed.weight") == (
        3,
        "model.embed.weight",
    )
    assert split_mini_batch("mini-batch 0 micro-batch 1") == (0, "micro-batch 1")
    for name in (
        "model.embed.weight",
        "mini-batch x w",
        "mini-batch 1",
        "trajectory 0",
    ):
        assert split_mini_batch(name) == (None, name)


def _old_shaped(stages: dict) -> dict:
    """``stages`` as the previous version recorded them: the weights once per step,
    after the update, by parameter name, and no ``weights_per_mini_batch``."""
    old = json.loads(json.dumps(stages))
    del old["weights_per_mini_batch"]
    weights = old["global"]["weights"]
    last = max(int(n.split()[1]) for n in weights)
    old["global"]["weights"] = {
        n.split(" ", 2)[2]: v for n, v in weights.items() if int(n.split()[1]) == last
    }
    return old


def test_a_recording_with_the_weights_once_per_step_still_compares(tmp_path):
    import os

    from test_store import manifest, traj

    from areal_debug.recording.format import step_dirname
    from areal_debug.recording.reader import RecordingReader
    from areal_debug.recording.writer.recording_writer import RecordingWriter
    from areal_debug.recording.writer.start import write_manifest

    # A stages.json exactly as the previous version wrote it.
    recorded_new = probed_step(FakeActor())
    old = _old_shaped(recorded_new)
    assert sorted(old["global"]["weights"]) == ["bias", "weight"]
    path = str(tmp_path / "rec")
    write_manifest(path, manifest())
    writer = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    writer.submit_batch(0, [traj(0)])
    writer.close()
    with open(os.path.join(path, step_dirname(0), STAGES_FILE), "w") as f:
        json.dump({"global_step": 0, **old, "digest_seconds": [0.001]}, f)
    recorded, tensors = RecordingReader(path).recorded_stages(0)
    assert tensors is None and "weights_per_mini_batch" not in recorded

    # The same training: every stage identical, the weights after the update.
    same = compare_stages(recorded, probed_step(FakeActor()), True)
    assert {r["status"] for r in same.values()} == {"identical"}
    assert same["weights"]["compared"] == 2
    assert "once per step" in same["weights"]["after_update"]
    # A changed learning rate: the loss of mini-batch 1 is the first stage both
    # have that differs; the weights (after the whole update) come after it.
    stages = compare_stages(recorded, probed_step(FakeActor(lr=0.2)), True)
    assert stages["weights"]["where"] == "weight"
    assert "mini_batch" not in stages["weights"]
    first = _report(stages)["first_divergence"]
    assert (first["stage"], first["mini_batch"]) == ("loss", 1)
    line = describe(0, stages)
    assert "weights after the update differ in 2 of 2 parameters, first weight" in line
    assert line.index("loss differs") < line.index("weights after the update")
    # Only the weights differ: located at them, after every mini-batch.
    weights_only = json.loads(json.dumps(recorded))
    weights_only["global"]["weights"]["bias"][0] = "0" * 32
    stages = compare_stages(weights_only, probed_step(FakeActor()), True)
    first = _report(stages)["first_divergence"]
    assert (first["stage"], first["where"]) == ("weights", "bias")


# -- real AReaL runs: a changed learning rate, one and two mini-batches ---------------
# The learning rate of the replays (the recordings train at tiny_fake.yaml's 1e-3).
CHANGED_LR = "actor.optimizer.lr=2.0e-3"


def assert_located_at_mini_batch_0s_weights(report: dict) -> dict:
    staged = report["first_divergence"]
    assert (staged["step"], staged["stage"], staged["mini_batch"]) == (0, "weights", 0)
    assert staged["where"].startswith("mini-batch 0 ")
    step0 = report["steps"][0]["stages"]
    assert step0["logp"]["status"] == step0["advantages"]["status"] == "identical"
    return step0


@pytest.mark.areal
@pytest.mark.spmd_recordings
def test_a_changed_learning_rate_is_located_at_the_first_mini_batchs_weights(spmd_d1):
    # spmd_d1 trains two mini-batches a step (tiny_fake.yaml): the loss of
    # mini-batch 1 differs too, after the weights of mini-batch 0 did (issue #30).
    # With debug.fail_on_divergence the run stops at that first divergent step.
    from support.harness import replay_report, run_torchrun

    run = run_torchrun(
        str(spmd_d1.workdir),
        "lr",
        1,
        [
            *spmd_d1.train_overrides,
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=lr",
            "total_train_steps=3",
            CHANGED_LR,
            "debug.fail_on_divergence=true",
        ],
    )
    assert run.returncode != 0
    report = replay_report(str(spmd_d1.workdir), trial="lr")
    step0 = assert_located_at_mini_batch_0s_weights(report)
    assert step0["loss"]["mini_batch"] == step0["grads"]["mini_batch"] == 1
    assert step0["loss"]["where"].startswith("mini-batch 1 micro-batch ")
    where = report["first_divergence"]["where"]
    assert f"first divergence: step 0, stage weights, at {where}" in run.log
    # It stopped at the first divergent step instead of running all three, saying
    # why once, without a traceback of ours and without AReaL's "Training failed"
    # one. The one traceback is torchrun's own (it raises ChildFailedError for any
    # child that exits non-zero); its "Root Cause" is the divergence, in one line,
    # from the error file torchrun asks its children for.
    assert run.log.count("Stopping (debug.fail_on_divergence)") == 2
    assert "Training failed with exception" not in run.log
    assert "RecordingError" not in run.log
    assert run.log.count("Traceback") == 1
    torchruns = run.log[run.log.index("Traceback") :]
    assert "ChildFailedError" in torchruns
    assert "To enable traceback see" not in torchruns
    cause = torchruns[torchruns.index("Root Cause") :]
    assert "exitcode  : 3" in cause
    assert (
        "traceback : Replay step 0 diverged from the recording (first divergence: "
        f"step 0, stage weights, at {where}" in cause
    ), cause
    assert "exitcode  : 3" in run.log
    assert [e["global_step"] for e in report["steps"]] == [0]


# The check above made again with one mini-batch on two processes (the one- and
# two-mini-batch cases both checked in-process above): a variant (make test-long).
@pytest.mark.areal
@pytest.mark.spmd_recordings
@pytest.mark.variant
def test_a_changed_learning_rate_with_one_mini_batch_is_located_at_its_weights(
    spmd_d2,
):
    from support.harness import replay_report, run_torchrun

    # spmd_d2 trains one mini-batch a step, on two processes.
    run = run_torchrun(
        str(spmd_d2.workdir),
        "lr-one",
        2,
        [
            "actor.backend=fsdp:d2",
            "rollout.backend=sglang:d2",
            *spmd_d2.train_overrides,
            "total_train_steps=1",
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=lr_one",
            CHANGED_LR,
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d2.workdir), trial="lr_one")
    step0 = assert_located_at_mini_batch_0s_weights(report)
    assert step0["loss"]["status"] == step0["grads"]["status"] == "identical"
    where = report["first_divergence"]["where"]
    assert f"First divergent stage: weights at step 0 ({where})." in run.log
    # The replay's story: what was changed, at its start, and at its end where
    # that took effect, in the log and the report.
    assert (
        "Replay: you changed 1 training setting(s) from the recording: "
        "actor.optimizer.lr 0.001 -> 0.002." in run.log
    )
    assert report["config_changes"] == [
        {"key": "actor.optimizer.lr", "recorded": 0.001, "replay": 0.002}
    ]
    headline = (
        f"left the recording at step 0: weights ({where}); you changed "
        "actor.optimizer.lr"
    )
    assert report["headline"] == headline
    assert f"Replay story: {headline}" in run.log


# -- the model: is it the recorded one? (issue 39, point 2) ------------------------------
def probed_first_step(engine: FakeActor) -> tuple[dict, dict]:
    """A run's first step: the actor's weights digested as it starts
    (``digest_model``, merged as the replay's check merges them), then the step
    as merge_global records it."""
    from areal_debug import areal_compat
    from areal_debug.stages.names import MODEL_STAGE
    from areal_debug.stages.probes import StageProbes

    probes, patches = StageProbes(), areal_compat.MethodPatches()
    probes.install_engine("actor", engine, patches)
    model = merge_global([{MODEL_STAGE: probes.digest_model(engine)}])
    engine.compute_logp([0])
    engine.compute_advantages([0])
    engine.ppo_update(torch.linspace(-1, 1, 12).reshape(4, 3))
    patches.remove_all()
    return model["global"][MODEL_STAGE], merge_global([probes.take().digests])


def test_a_model_that_is_not_the_recorded_one_is_named_before_the_step():
    from areal_debug.compare.stages import compare_model

    recorded_model, recorded = probed_first_step(FakeActor())
    # The dump's first step keeps the model's digests, one per parameter.
    assert sorted(recorded["global"]["model"]) == ["bias", "weight"]
    same, _ = probed_first_step(FakeActor())
    result = compare_model(0, same, recorded, None)
    assert (result["status"], result["compared"]) == ("identical", 2)
    assert result["against"] == "the weights the dump run started step 0 from"

    other = FakeActor()
    with torch.no_grad():
        other.model.bias[1] += 1e-3
    replayed_model, replayed = probed_first_step(other)
    result = compare_model(0, replayed_model, recorded, None)
    assert result["status"] == "differs"
    assert (result["where"], result["differing"], result["compared"]) == ("bias", 1, 2)
    # At the step's end the model is the first stage walked: the step left the
    # recording there, before any log-prob.
    stages = compare_stages(recorded, replayed, True)
    assert next(iter(stages)) == "model" and stages["model"]["where"] == "bias"
    first = _report(stages)["first_divergence"]
    assert (first["stage"], first["where"]) == ("model", "bias")
    report = ReplayReport(
        "rec", 0.0, 0.0, TopologyChange("spmd", "spmd", 1, 1, 1, 1), model=result
    )
    assert report.headline() == (
        "the model is not the recorded one (1 of 2 parameters differ, first bias)"
    )
    assert report.to_json()["model"] == result


def test_a_replay_from_a_kept_checkpoint_checks_the_weights_after_the_step_before():
    from areal_debug.compare.stages import compare_model
    from areal_debug.stages.names import MODEL_STAGE
    from areal_debug.stages.probes import StageProbes

    engine = FakeActor()
    _, step0 = probed_first_step(engine)  # engine now holds the weights after step 0
    restored = merge_global([{MODEL_STAGE: StageProbes().digest_model(engine)}])
    restored = restored["global"][MODEL_STAGE]
    # The recording's step 1 has no model digest (its run did not start there).
    result = compare_model(1, restored, {"ranks": [], "global": {}}, step0)
    assert result["status"] == "identical" and result["compared"] == 2
    assert result["against"] == "the dump run's weights after step 0"
    # The initial weights are not those.
    initial, _ = probed_first_step(FakeActor())
    assert compare_model(1, initial, None, step0)["status"] == "differs"
    # A recording without either: not checked, and why.
    result = compare_model(0, initial, {"ranks": [], "global": {}}, None)
    assert result["status"] == "not_compared"
    assert "keeps no digest of the weights step 0 starts from" in result["reason"]
    # Only one side digested the model at this step (each run digests it at its
    # own first step): not compared at the step's end.
    assert "model" in step0["global"]
    without = {
        **step0,
        "global": {k: v for k, v in step0["global"].items() if k != "model"},
    }
    assert "model" not in compare_stages(step0, without, True)
    assert "model" not in compare_stages(without, step0, True)
