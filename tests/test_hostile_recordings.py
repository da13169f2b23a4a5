# SPDX-License-Identifier: Apache-2.0
"""What the hostile-recording fuzzing found, one regression test each, and the
fuzzing itself on a fixed seed (the full run is `make reliability`)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from areal_debug.cli import main as cli
from areal_debug.recording.format import (
    MANIFEST,
    STATS,
    STEP_META,
    RecordingError,
    shard_payload_name,
    step_dirname,
)
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.payload_file import save_payload
from reliability import hostile, recording


@pytest.fixture
def rec(tmp_path) -> str:
    path = str(tmp_path / "rec")
    recording.write(path)
    return path


def _step_file(path: str, name: str) -> str:
    return os.path.join(path, step_dirname(0), name)


def _edit(file: str, change) -> None:
    with open(file) as f:
        doc = json.load(f)
    change(doc)
    with open(file, "w") as f:
        json.dump(doc, f)


@pytest.mark.parametrize(
    "name", ["../step-000001/shard-00000.pt.zst", "/etc/passwd", "..", "a/b", ""]
)
def test_a_payload_name_that_leaves_its_step_is_refused(rec, name):
    _edit(
        _step_file(rec, STEP_META),
        lambda m: m["shards"][0].update(file=name),
    )
    with pytest.raises(RecordingError, match="not a plain file name"):
        RecordingReader(rec).load_shard(0, 0)


def test_a_payload_linking_outside_is_refused_before_it_is_opened(rec, tmp_path):
    payload = _step_file(rec, shard_payload_name(0, "zstd"))
    outside = tmp_path / "outside.pt.zst"
    os.replace(payload, outside)  # the very bytes: the checksum would pass
    os.symlink(outside, payload)
    with pytest.raises(RecordingError, match="leads outside the recording"):
        RecordingReader(rec).load_shard(0, 0)


def test_a_fifo_in_place_of_a_file_does_not_block(rec):
    meta = _step_file(rec, STEP_META)
    os.unlink(meta)
    os.mkfifo(meta)
    with pytest.raises(RecordingError, match="not a regular file"):
        RecordingReader(rec).step_meta(0)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m.pop("num_tokens"), "num_tokens is None"),
        (
            lambda m: m.update(global_step=1),
            "global_step is 1 in the directory of step 0",
        ),
        (lambda m: m["shards"].pop(), "'shards' must list 2 payload"),
        (lambda m: m["shards"][0].update(raw_bytes=10**30), "raw_bytes is 10000"),
        (lambda m: m["shards"][1].update(sha256=None), r"shards\[1\].sha256 is None"),
        (lambda m: m.update(policy_version="0-1"), "policy_version is '0-1'"),
    ],
)
def test_step_metadata_is_validated_before_use(rec, change, message, capsys):
    _edit(_step_file(rec, STEP_META), change)
    with pytest.raises(RecordingError, match=message):
        RecordingReader(rec).step_meta(0)
    # inspect reads the same metadata: one line, no traceback.
    assert cli(["inspect", rec]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_deeply_nested_json_is_a_recording_error(rec):
    with open(_step_file(rec, STATS), "w") as f:
        f.write("[" * 200_000 + "]" * 200_000)
    with pytest.raises(RecordingError, match="Cannot read the recorded statistics"):
        RecordingReader(rec).recorded_stats(0)


def test_statistics_of_the_wrong_type_are_named(rec):
    _edit(_step_file(rec, STATS), lambda s: s["stats"].update(loss="high"))
    with pytest.raises(RecordingError, match="'stats' must map names to numbers"):
        RecordingReader(rec).recorded_stats(0)


def test_a_manifest_with_absurdly_many_shards_is_refused(rec):
    _edit(os.path.join(rec, MANIFEST), lambda m: m["layout"].update(num_shards=10**30))
    with pytest.raises(RecordingError, match="num_shards must be 1..65536"):
        RecordingReader(rec)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("input_ids", torch.zeros(2, 6), "must be an integer or bool tensor"),
        ("logprobs", torch.zeros(2, 6, dtype=torch.int32), "must be a floating-point"),
        ("loss_mask", torch.ones(2, 5, dtype=torch.int32), "is shaped \\[2, 5\\]"),
        ("attention_mask", 1, "must be an integer or bool tensor, it is int 1"),
        (5, torch.zeros(1), "has the key 5, not a name"),
    ],
)
def test_payload_tensors_the_trainer_cannot_use_are_named(rec, key, value, message):
    reader = RecordingReader(rec)
    batch = reader.load_shard(0, 0)
    batch[1][key] = value
    meta_path = _step_file(rec, STEP_META)
    stored = save_payload(_step_file(rec, shard_payload_name(0, "zstd")), batch, "zstd")
    _edit(meta_path, lambda m: m["shards"][0].update(stored))
    with pytest.raises(RecordingError, match=f"trajectory 1.*{message}") as e:
        RecordingReader(rec).load_shard(0, 0)
    assert shard_payload_name(0, "zstd") in str(e.value)


def test_verify_reads_every_file_of_a_step(rec, capsys):
    assert cli(["verify", rec]) == 0
    # Per step: step.json, 2 shards, teacher log-probs, stats, rng, stages.
    assert "14/14 files of 2 steps verified" in capsys.readouterr().out
    _edit(_step_file(rec, STATS), lambda s: s.update(rng_sha256="0" * 64))
    assert cli(["verify", rec]) == 1
    assert "Checksum mismatch in" in capsys.readouterr().out


def test_fuzzed_hostile_recordings_are_all_handled(tmp_path):
    """The three hostile families on a fixed seed: every case handled."""
    tallies = hostile.run(str(tmp_path), 40, seed=0)
    for tally in tallies:
        assert tally.all_handled, tally.failures
    assert sum(t.tried for t in tallies) >= 120
