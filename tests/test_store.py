# SPDX-License-Identifier: Apache-2.0
"""The on-disk format: writer, reader, checksums, safety, re-sharding."""

import io
import json
import os

import pytest
import torch

from areal_debug.store_format import (
    FORMAT_VERSION,
    MANIFEST,
    STEP_META,
    RecordingError,
    sha256_bytes,
    shard_payload_name,
    step_dirname,
)
from areal_debug.store_reader import RecordingReader, format_ranges
from areal_debug.store_writer import (
    RecordingWriter,
    snapshot_batch,
    supersede_steps,
    write_manifest,
)


def traj(seed: int, group: int = 2, length: int = 5) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(
            0, 50, (group, length), generator=g, dtype=torch.int32
        ),
        "loss_mask": torch.ones(group, length, dtype=torch.int32),
        "logprobs": -torch.rand(group, length, generator=g),
        "versions": torch.full((group, length), seed % 3, dtype=torch.int32),
        "attention_mask": torch.ones(group, length, dtype=torch.bool),
        "rewards": torch.rand(group, generator=g),
    }


def manifest(num_shards=1, steps_per_epoch=10, trial="t0"):
    return {
        "format_version": FORMAT_VERSION,
        "created": "now",
        "experiment_name": "exp",
        "trial_name": trial,
        "layout": {"num_shards": num_shards, "steps_per_epoch": steps_per_epoch},
    }


def record(path, steps: dict[int, list[list[dict]]], steps_per_epoch=10):
    """Write steps {step: [shard0 batch, shard1 batch, ...]} through the real writer."""
    num_shards = len(next(iter(steps.values())))
    write_manifest(path, manifest(num_shards, steps_per_epoch))
    writers = [
        RecordingWriter(
            path, shard=s, num_shards=num_shards, steps_per_epoch=steps_per_epoch
        )
        for s in range(num_shards)
    ]
    for step, shards in steps.items():
        for w, batch in zip(writers, shards):
            w.submit_batch(step, batch)
    for w in writers:
        w.close()


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k
            else:
                assert x[k] == y[k], k


def test_round_trip_is_exact_and_keeps_plain_values(tmp_path):
    batch = [traj(1), traj(2)]
    batch[0]["task_id"] = "gsm8k-17"
    batch[0]["meta"] = [{"tool": "calc", "calls": 3, "ok": True, "score": 0.25}, None]
    batch[1]["turns"] = (1, 2.5, "x")
    record(str(tmp_path), {0: [batch]})
    loaded = RecordingReader(str(tmp_path)).load_shard(0, 0)
    assert_batches_equal(batch, loaded)
    assert loaded[0]["meta"][0]["calls"] == 3


def test_step_metadata_describes_the_shard(tmp_path):
    batch = [traj(1, group=2, length=5), traj(2, group=2, length=5)]
    record(str(tmp_path), {4: [batch]}, steps_per_epoch=3)
    meta = RecordingReader(str(tmp_path)).step_meta(4)
    assert (meta["epoch"], meta["epoch_step"]) == (1, 1)
    shard = meta["shards"][0]
    assert shard["num_trajectories"] == 2
    assert shard["num_sequences"] == 4
    assert shard["num_tokens"] == 20
    assert shard["keys"]["input_ids"] == "int32"
    assert shard["keys"]["attention_mask"] == "bool"
    assert meta["policy_version"] == [1, 2]
    data = (tmp_path / step_dirname(4) / shard_payload_name(0)).read_bytes()
    assert shard["sha256"] == sha256_bytes(data) and shard["bytes"] == len(data)


def test_snapshot_is_not_altered_by_later_in_place_changes(tmp_path):
    batch = [traj(1)]
    expected = [{k: v.clone() for k, v in batch[0].items()}]
    writer_path = str(tmp_path)
    write_manifest(writer_path, manifest())
    w = RecordingWriter(writer_path, shard=0, num_shards=1, steps_per_epoch=10)
    w.submit_batch(0, batch)
    # What the trainer does right after prepare_batch returns.
    batch[0]["prox_logp"] = torch.zeros(2, 5)
    batch[0]["rewards"].mul_(100)
    batch[0]["input_ids"].zero_()
    w.close()
    assert_batches_equal(expected, RecordingReader(writer_path).load_shard(0, 0))


def test_step_without_step_meta_does_not_exist(tmp_path):
    record(str(tmp_path), {0: [[traj(1)]], 1: [[traj(2)]]})
    os.unlink(tmp_path / step_dirname(1) / STEP_META)
    reader = RecordingReader(str(tmp_path))
    assert reader.available_steps() == [0]


def test_step_is_complete_only_when_every_head_wrote(tmp_path):
    write_manifest(str(tmp_path), manifest(num_shards=2))
    w0 = RecordingWriter(str(tmp_path), shard=0, num_shards=2, steps_per_epoch=10)
    w0.submit_batch(0, [traj(1)])
    w0.close()
    assert RecordingReader(str(tmp_path)).available_steps() == []
    w1 = RecordingWriter(str(tmp_path), shard=1, num_shards=2, steps_per_epoch=10)
    w1.submit_batch(0, [traj(2)])
    w1.close()
    meta = RecordingReader(str(tmp_path)).step_meta(0)
    assert [s["shard"] for s in meta["shards"]] == [0, 1]
    assert meta["num_trajectories"] == 2


def test_no_temporary_files_are_left(tmp_path):
    record(str(tmp_path), {0: [[traj(1)]]})
    leftovers = [p for p in tmp_path.rglob(".tmp-*")]
    assert leftovers == []


def test_missing_steps_error_lists_them_and_the_causes(tmp_path):
    record(str(tmp_path), {0: [[traj(0)]], 1: [[traj(1)]], 2: [[traj(2)]]})
    reader = RecordingReader(str(tmp_path))
    with pytest.raises(RecordingError) as e:
        reader.require_steps(range(0, 6))
    msg = str(e.value)
    assert "lacks steps 3-5" in msg
    assert "complete steps: 0-2" in msg
    assert "dump run stopped earlier" in msg and "debug.path" in msg


def test_flipped_byte_is_reported_with_both_hashes(tmp_path):
    batch = [traj(1)]
    record(str(tmp_path), {0: [batch]})
    payload = tmp_path / step_dirname(0) / shard_payload_name(0)
    data = bytearray(payload.read_bytes())
    expected = sha256_bytes(bytes(data))
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path)).load_shard(0, 0)
    msg = str(e.value)
    assert "Checksum mismatch" in msg and str(payload) in msg
    assert expected in msg and sha256_bytes(bytes(data)) in msg


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_object_is_refused_and_never_executed(tmp_path):
    record(str(tmp_path), {0: [[traj(1)]]})
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save([{"input_ids": torch.zeros(1, 2), "x": _Exploit(str(marker))}], buf)
    data = buf.getvalue()
    step = tmp_path / step_dirname(0)
    (step / shard_payload_name(0)).write_bytes(data)
    # A matching checksum: only weights_only stands between the file and code.
    meta = json.loads((step / STEP_META).read_text())
    meta["shards"][0]["sha256"] = sha256_bytes(data)
    (step / STEP_META).write_text(json.dumps(meta))
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path)).load_shard(0, 0)
    assert "Refused to load" in str(e.value) and shard_payload_name(0) in str(e.value)
    assert not marker.exists()


def test_unsupported_format_version(tmp_path):
    record(str(tmp_path), {0: [[traj(1)]]})
    m = json.loads((tmp_path / MANIFEST).read_text())
    m["format_version"] = 99
    (tmp_path / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path))
    assert "format_version=99" in str(e.value) and "[1]" in str(e.value)


def test_wrong_path_and_non_recording(tmp_path):
    with pytest.raises(RecordingError, match="directory does not exist"):
        RecordingReader(str(tmp_path / "nope"))
    with pytest.raises(RecordingError, match="has no manifest.json"):
        RecordingReader(str(tmp_path))


def test_unstorable_value_is_refused_at_dump_time():
    import numpy as np

    with pytest.raises(TypeError) as e:
        snapshot_batch([{"input_ids": torch.zeros(1), "extra": {"arr": np.zeros(3)}}])
    assert "trajectory[0]['extra']['arr']" in str(e.value)
    assert "numpy.ndarray" in str(e.value) and "weights_only" in str(e.value)


def test_manifest_of_another_run_is_never_mixed(tmp_path):
    write_manifest(str(tmp_path), manifest(trial="t0"))
    write_manifest(str(tmp_path), manifest(trial="t0"))  # a resumed run: fine
    with pytest.raises(RecordingError) as e:
        write_manifest(str(tmp_path), manifest(trial="other"))
    assert "already holds a different recording" in str(e.value)
    assert "trial_name: recorded 't0', this run 'other'" in str(e.value)


def test_rerecorded_steps_are_moved_aside_not_overwritten(tmp_path):
    record(str(tmp_path), {0: [[traj(0)]], 1: [[traj(1)]], 2: [[traj(2)]]})
    assert supersede_steps(str(tmp_path), 1) == [1, 2]
    assert RecordingReader(str(tmp_path)).available_steps() == [0]
    kept = list((tmp_path / "superseded").rglob(STEP_META))
    assert len(kept) == 2


@pytest.mark.parametrize("replay_heads", [1, 2, 4])
def test_resharding_concatenates_in_rank_order(tmp_path, replay_heads):
    shards = [[traj(10 * s + i) for i in range(2)] for s in range(2)]  # 2 heads x 2
    record(str(tmp_path), {0: shards})
    reader = RecordingReader(str(tmp_path))
    whole = shards[0] + shards[1]
    got = []
    for r in range(replay_heads):
        got.extend(reader.load_for_head(0, r, replay_heads))
    assert_batches_equal(whole, got)
    if replay_heads == 2:  # same topology: exactly the recorded shard
        assert_batches_equal(shards[1], reader.load_for_head(0, 1, 2))


def test_resharding_not_divisible_names_both_sizes(tmp_path):
    record(str(tmp_path), {0: [[traj(1), traj(2)], [traj(3), traj(4)]]})
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path)).load_for_head(0, 0, 3)
    assert "4 trajectories" in str(e.value) and "not divisible by 3" in str(e.value)


def test_writer_failure_surfaces_on_the_training_thread(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = RecordingWriter(str(blocker), shard=0, num_shards=1, steps_per_epoch=1)
    w.submit_batch(0, [traj(1)])
    with pytest.raises(RecordingError, match="Writing the recording"):
        w.flush()
    with pytest.raises(RecordingError):
        w.close()


def test_format_ranges():
    assert format_ranges([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"
    assert format_ranges([]) == "none"


def test_accelerator_snapshot_copies_containers_not_tensors():
    batch = [traj(1)]
    snap = snapshot_batch(batch, clone_tensors=False)
    batch[0]["prox_logp"] = torch.zeros(2, 5)
    assert "prox_logp" not in snap[0]
    assert snap[0]["input_ids"].data_ptr() == batch[0]["input_ids"].data_ptr()
    cloned = snapshot_batch(batch, clone_tensors=True)
    assert cloned[0]["input_ids"].data_ptr() != batch[0]["input_ids"].data_ptr()


def test_policy_version_ignores_prompt_and_padding():
    from areal_debug.store_format import describe_batch

    t = traj(1, group=2, length=6)
    t["versions"] = torch.tensor(
        [[-1, -1, 4, 5, 0, 0], [-1, -1, 4, 4, 4, 4]], dtype=torch.int32
    )
    t["loss_mask"] = torch.tensor(
        [[0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]], dtype=torch.int32
    )
    assert describe_batch([t])["policy_version"] == [4, 5]


def test_queued_steps_are_written_when_the_process_exits_without_close(tmp_path):
    import subprocess
    import sys

    script = f"""
import torch
from areal_debug.store_writer import RecordingWriter, write_manifest
from test_store import manifest, traj
write_manifest({str(tmp_path)!r}, manifest())
w = RecordingWriter({str(tmp_path)!r}, shard=0, num_shards=1, steps_per_epoch=10,
                    max_pending=8)
for step in range(5):
    w.submit_batch(step, [traj(step, length=4096)])
# no flush, no close: the interpreter exits with steps still queued
"""
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        cwd=tests_dir,
        env={**os.environ, "PYTHONPATH": tests_dir},
        timeout=120,
    )
    reader = RecordingReader(str(tmp_path))
    assert reader.available_steps() == [0, 1, 2, 3, 4]
    assert_batches_equal([traj(4, length=4096)], reader.load_shard(4, 0))


def test_teacher_log_probs_complete_the_step_and_load_checked(tmp_path):
    from concurrent.futures import Future

    from areal_debug.engines import ReplayTeacher
    from areal_debug.store_format import TEACHER_LOGP

    path = str(tmp_path / "rec")
    write_manifest(path, manifest())
    writer = RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=10, records_teacher=True
    )
    batch = [traj(0), traj(1)]
    logps = [-torch.rand(2, 5), -torch.rand(2, 5)]
    writer.submit_batch(0, batch)
    writer.flush()
    # The batch alone does not make the step: its teacher log-probs are due.
    assert RecordingReader(path).available_steps() == []
    fetched: Future = Future()  # as the single-controller fetch hands them over
    fetched.set_result(logps)
    writer.submit_teacher_logp(0, fetched)
    writer.close()
    reader = RecordingReader(path)
    assert reader.available_steps() == [0]
    assert reader.step_meta(0)["teacher_logp"]["num_trajectories"] == 2
    got = reader.recorded_teacher_logp(0)
    assert all(torch.equal(a, b) for a, b in zip(got, logps, strict=True))
    teacher = ReplayTeacher(reader, lambda: 0)
    assert len(teacher.compute_logp(batch)) == 2
    with pytest.raises(RecordingError, match="teacher log-probs of 2 trajectories"):
        teacher.compute_logp(batch[:1])
    with open(os.path.join(path, step_dirname(0), TEACHER_LOGP), "r+b") as f:
        f.seek(-3, 2)
        f.write(b"\x00\x01\x02")
    with pytest.raises(RecordingError, match=f"Checksum mismatch in .*{TEACHER_LOGP}"):
        RecordingReader(path).recorded_teacher_logp(0)


def test_a_step_without_teacher_log_probs_says_how_to_replay(tmp_path):
    path = str(tmp_path / "rec")
    record(path, {0: [[traj(0)]]})
    with pytest.raises(
        RecordingError, match="holds no teacher log-probs.*teacher=null"
    ):
        RecordingReader(path).recorded_teacher_logp(0)
