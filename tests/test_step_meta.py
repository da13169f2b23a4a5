# SPDX-License-Identifier: Apache-2.0
"""Step and shard metadata, typed (``recording/schema.py``): the JSON they write
is the on-disk format of every version, and they read every version's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from areal_debug.recording.format import FORMAT_VERSION, RecordingError
from areal_debug.recording.schema import PayloadEntry, ShardMeta, StepMeta

V1 = Path(__file__).parent / "fixtures" / "recording-v1"
SHA = "ab" * 32


def stored(name: str = "shard-00000.pt.zst") -> dict:
    """What ``save_payload`` returns for a stored file."""
    return {"file": name, "codec": "zstd", "bytes": 10, "raw_bytes": 40, "sha256": SHA}


def described(n: int, tokens: int, versions: list[int] | None) -> dict:
    """What ``describe_batch`` returns for a batch."""
    return {
        "num_trajectories": n,
        "num_sequences": 2 * n,
        "num_tokens": tokens,
        "keys": {"input_ids": "int32"},
        "policy_version": versions,
    }


def test_a_shard_writes_what_the_writer_always_wrote():
    # shard-NNNNN.json was {"shard": i, **stored, **described}.
    meta = ShardMeta.written(1, stored(), described(3, 30, [2, 4]))
    assert meta.to_json() == {"shard": 1, **stored(), **described(3, 30, [2, 4])}
    assert ShardMeta.from_json(meta.to_json(), "x.json") == meta


def test_a_shard_keeps_its_samples_digests_both_ways():
    import torch

    from areal_debug.recording.contents import BatchContents

    batch = [
        {
            "input_ids": torch.tensor([[5, 6, 7], [5, 6, 8]]),
            "loss_mask": torch.tensor([[0, 1, 1], [0, 1, 1]]),
            "versions": torch.tensor([[-1, 2, 3], [-1, 4, 4]]),
            "rewards": torch.tensor([1.0, float("inf")]),
        }
    ]
    contents = BatchContents.of_batch(batch)
    # One prompt (token 5), two completions, a reward and a version range each.
    assert contents.rows == (2,) and len(set(contents.prompt)) == 1
    assert len(set(contents.completion)) == 2
    assert contents.reward == (1.0, "inf")
    assert (contents.first_version, contents.last_version) == ((2, 4), (3, 4))
    meta = ShardMeta.written(
        0, stored(), {**described(1, 6, [2, 4]), "contents": contents.to_json()}
    )
    assert meta.contents == contents
    assert ShardMeta.from_json(meta.to_json(), "x.json") == meta
    raw = meta.to_json()
    raw["contents"]["reward"].pop()
    with pytest.raises(RecordingError, match=r"contents.reward must list 2 values"):
        ShardMeta.from_json(raw, "shard-00000.json")


def test_a_step_sums_its_shards_and_spans_their_versions():
    shards = [
        ShardMeta.written(0, stored(), described(3, 30, [2, 4])),
        ShardMeta.written(1, stored(), described(1, 5, None)),
        ShardMeta.written(2, stored(), described(2, 7, [1, 3])),
    ]
    teacher = PayloadEntry.stored(stored("teacher_logp.pt.zst"), 6)
    meta = StepMeta.of_shards(7, 3, shards, teacher)
    assert meta.to_json() == {
        "format_version": FORMAT_VERSION,
        "global_step": 7,
        "epoch": 2,
        "epoch_step": 1,
        "num_shards": 3,
        "num_trajectories": 6,
        "num_tokens": 42,
        "policy_version": [1, 4],
        "shards": [s.to_json() for s in shards],
        # teacher_logp.json was {**stored, "num_trajectories": n}.
        "teacher_logp": {**stored("teacher_logp.pt.zst"), "num_trajectories": 6},
    }
    assert StepMeta.from_json(meta.to_json(), "step.json", 7, 3) == meta
    assert [e.file for e in meta.payloads][-1] == "teacher_logp.pt.zst"
    none = StepMeta.of_shards(0, 1, shards[1:2])
    assert none.policy_version is None and "teacher_logp" not in none.to_json()


@pytest.mark.parametrize("step", [0, 1])
def test_version_1_metadata_reads_as_it_meant(step):
    path = V1 / f"step-{step:06d}" / "step.json"
    raw = json.loads(path.read_text())
    meta = StepMeta.from_json(raw, str(path), step, 1)
    (entry,) = meta.payloads
    # No codec or raw size in version 1: plain torch.save payloads.
    assert (entry.codec, entry.raw_bytes) == ("none", None)
    assert meta.format_version == 1 and meta.policy_version == (step, step)
    written = meta.to_json()
    assert written["shards"][0].pop("codec") == "none"
    assert written == raw


def test_keys_a_reader_does_not_know_are_ignored():
    meta = StepMeta.of_shards(
        0, 1, [ShardMeta.written(0, stored(), described(1, 2, None))]
    )
    raw = meta.to_json()
    raw["added_later"] = {"any": 1}
    raw["shards"][0]["also_later"] = [1]
    assert StepMeta.from_json(raw, "step.json", 0, 1) == meta


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m["shards"][0].update(file=5), r"shards\[0\].file is 5"),
        (lambda m: m["shards"][0].pop("num_tokens"), r"shards\[0\].num_tokens is None"),
        (
            lambda m: m["shards"][0].update(policy_version=[1]),
            r"shards\[0\].policy_version is \[1\], not \[min, max\]",
        ),
        (lambda m: m.update(teacher_logp=[]), "teacher_logp is a list of 0"),
        (lambda m: m.pop("epoch_step"), "epoch_step is None"),
        (lambda m: m.update(num_shards=2), "num_shards is 2, the manifest says 1"),
        (lambda m: m.update(shards={}), "'shards' must list 1 payload"),
    ],
)
def test_what_is_wrong_is_named_with_its_file(change, message):
    shard = ShardMeta.written(0, stored(), described(1, 2, None))
    raw = StepMeta.of_shards(0, 1, [shard], PayloadEntry.stored(stored(), 1)).to_json()
    change(raw)
    with pytest.raises(RecordingError, match=f"step.json is not valid.*{message}"):
        StepMeta.from_json(raw, "step.json", 0, 1)


def test_a_shard_file_is_named_as_such():
    with pytest.raises(RecordingError, match="shard-00001.json is not valid shard me"):
        ShardMeta.from_json([], "shard-00001.json", what="shard metadata")
