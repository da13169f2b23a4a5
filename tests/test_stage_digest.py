# SPDX-License-Identifier: Apache-2.0
"""Stage digests and their comparison, without a trainer (the real-AReaL runs that
record and compare them are in tests/test_reproduce.py and tests/test_areal_spmd.py)."""

from __future__ import annotations

import json

import pytest
import torch

from areal_debug.compare.report import ReplayReport, TopologyChange
from areal_debug.compare.statistics import StatsComparison
from areal_debug.recording.format import STAGES_FILE, RecordingError
from areal_debug.stages.comparison import compare_stages, describe
from areal_debug.stages.digest import (
    StageLog,
    digest_hex,
    digest_pair,
    merge_global,
)
from areal_debug.stages.names import (
    TOKEN_STAGES,
    StageKeyError,
    StageTensorKey,
    trajectory_index,
    trajectory_name,
)
from areal_debug.stages.record import StageRecord


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


def test_per_rank_stages_are_not_compared_across_layouts():
    logp, w = torch.randn(5), torch.randn(3)
    rec, _ = _log(0.5, logp, w)
    stages = compare_stages(rec, rec, same_layout=False)
    assert stages["logp"]["status"] == "not_compared"
    assert stages["weights"]["status"] == "identical"


def test_stages_round_trip_through_the_recording_and_damage_is_named(tmp_path):
    import os

    from test_store import manifest, traj

    from areal_debug.recording.format import STAGE_TENSORS, step_dirname
    from areal_debug.recording.reader import RecordingReader
    from areal_debug.recording.writer import RecordingWriter, write_manifest

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
    with open(os.path.join(step_dir, STAGE_TENSORS), "r+b") as f:
        f.seek(-3, 2)
        f.write(b"\x00\x01\x02")
    with pytest.raises(RecordingError, match=f"Checksum mismatch in .*{STAGE_TENSORS}"):
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
    # Groups cut at the chunk size, and a tensor larger than a chunk alone.
    monkeypatch.setattr(stage_digest, "_CHUNK", 20)
    assert torch.equal(digest_pairs(tensors, offsets), one_by_one)


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
    """The actor engine's surface the probes wrap (STAGE_METHODS's names)."""

    model = None

    def compute_logp(self, data):
        return [torch.full((2, 3), -0.5) for _ in data]

    def compute_advantages(self, data):
        return [{"advantages": torch.ones(2, 3), "returns": torch.zeros(2, 3)}]

    def train_batch(self, data, loss_fn):
        return loss_fn(data)

    def optimizer_step(self):
        return {}

    def ppo_update(self, data):
        for _ in range(2):
            self.train_batch(data, loss_fn=lambda d: torch.tensor(0.25))
            self.optimizer_step()


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
    assert set(vars(engine)) == set(stage_methods("actor"))
    engine.compute_logp([0])
    engine.compute_advantages([0])
    engine.ppo_update([0])
    digests = probes.take().digests
    assert list(digests) == ["logp", "advantages", "loss"]
    assert list(digests["loss"]) == [
        "mini-batch 0 micro-batch 0",
        "mini-batch 1 micro-batch 0",
    ]
    patches.remove_all()
    assert not vars(engine)
    with pytest.raises(NotImplementedError, match="_probe_generate"):
        probes._probe("generate")
