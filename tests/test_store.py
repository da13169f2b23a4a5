# SPDX-License-Identifier: Apache-2.0
"""The on-disk format: writer, reader, checksums, safety, re-sharding."""

import io
import json
import os

import pytest
import torch

from areal_debug.recording.codecs import encode_payload, sha256_bytes
from areal_debug.recording.format import (
    FORMAT_VERSION,
    MANIFEST,
    STEP_META,
    RecordingError,
    shard_payload_name,
    step_dirname,
)
from areal_debug.recording.packed_payload import pack
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.snapshot import snapshot_batch
from areal_debug.recording.writer.start import supersede_steps, write_manifest


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


def patch_writer(monkeypatch, name: str, fake) -> None:
    """Replace ``name`` (save_payload, atomic_write_json) in every module of the
    writer that calls it."""
    from areal_debug.recording.writer import router, step_files, stop_marker

    for module in (router, step_files, stop_marker):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, fake)


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
    assert (meta.epoch, meta.epoch_step) == (1, 1)
    shard = meta.shards[0]
    assert shard.num_trajectories == 2
    assert shard.num_sequences == 4
    assert shard.num_tokens == 20
    assert shard.keys["input_ids"] == "int32"
    assert shard.keys["attention_mask"] == "bool"
    assert meta.policy_version == (1, 2)
    data = (tmp_path / step_dirname(4) / shard_payload_name(0, "zstd")).read_bytes()
    assert shard.entry.sha256 == sha256_bytes(data)
    assert shard.entry.bytes == len(data)


def test_snapshot_is_not_altered_by_what_the_trainer_does_next(tmp_path):
    batch = [traj(1)]
    expected = [{k: v.clone() for k, v in batch[0].items()}]
    writer_path = str(tmp_path)
    write_manifest(writer_path, manifest())
    w = RecordingWriter(writer_path, shard=0, num_shards=1, steps_per_epoch=10)
    w.submit_batch(0, batch)
    # What AReaL's trainer does right after prepare_batch returns: new keys and
    # entries replaced (compute_advantages); in-place changes: test_snapshot.py.
    batch[0]["prox_logp"] = torch.zeros(2, 5)
    batch[0]["logprobs"] = torch.zeros(2, 5)
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
    assert [s.shard for s in meta.shards] == [0, 1]
    assert meta.num_trajectories == 2


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
    payload = tmp_path / step_dirname(0) / shard_payload_name(0, "zstd")
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
    raw = buf.getvalue()
    data = encode_payload(raw, "zstd", 1)
    step = tmp_path / step_dirname(0)
    name = shard_payload_name(0, "zstd")
    (step / name).write_bytes(data)
    # A matching checksum: only weights_only stands between the file and code.
    meta = json.loads((step / STEP_META).read_text())
    meta["shards"][0].update(sha256=sha256_bytes(data), raw_bytes=len(raw))
    (step / STEP_META).write_text(json.dumps(meta))
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path)).load_shard(0, 0)
    assert "Refused to load" in str(e.value) and name in str(e.value)
    assert not marker.exists()


def test_unsupported_format_version(tmp_path):
    record(str(tmp_path), {0: [[traj(1)]]})
    m = json.loads((tmp_path / MANIFEST).read_text())
    m["format_version"] = 99
    (tmp_path / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path))
    assert "format_version=99" in str(e.value) and "[1, 2, 3]" in str(e.value)


def test_wrong_path_and_non_recording(tmp_path):
    with pytest.raises(RecordingError, match="directory does not exist"):
        RecordingReader(str(tmp_path / "nope"))
    with pytest.raises(RecordingError, match="has no manifest.json") as e:
        RecordingReader(str(tmp_path))
    assert "areal-debug ls FILEROOT" in str(e.value)
    # A trial directory, one level above its recording: the message names it.
    write_manifest(str(tmp_path / "areal_debug_recording"), manifest(trial="t0"))
    with pytest.raises(RecordingError) as e:
        RecordingReader(str(tmp_path))
    assert str(e.value).startswith(
        f"{tmp_path} is not a recording (it has no manifest.json), but it holds one: "
        f"{tmp_path / 'areal_debug_recording'}. Give that directory instead"
    )


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


def test_writer_failure_is_fatal_only_when_asked(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = RecordingWriter(
        str(blocker), shard=0, num_shards=1, steps_per_epoch=1, fatal_errors=True
    )
    w.submit_batch(0, [traj(1)])
    with pytest.raises(RecordingError, match="Writing the recording"):
        w.flush()
    with pytest.raises(RecordingError):
        w.close()
    # By default the recording stops and the training thread never sees an error.
    w = RecordingWriter(str(blocker), shard=0, num_shards=1, steps_per_epoch=1)
    w.submit_batch(0, [traj(1)])
    w.flush()
    w.submit_batch(1, [traj(2)])
    w.close()
    assert w.stopped is not None and w.stopped[0] == 0


def test_a_full_disk_stops_the_recording_where_it_failed(tmp_path, monkeypatch):
    """Steps before the failure stay whole; the recording says where and why."""
    import errno
    import logging

    from areal_debug.cli import main
    from areal_debug.recording.writer.jobs import logger
    from areal_debug.recording.writer.payload_file import save_payload

    real = save_payload

    def disk_full_from_step_2(path, obj, *args):
        if step_dirname(2) in path:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, obj, *args)

    patch_writer(monkeypatch, "save_payload", disk_full_from_step_2)
    errors: list[str] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: errors.append(record.getMessage())
    logger.addHandler(handler)
    monkeypatch.setattr(logger, "disabled", False)
    write_manifest(str(tmp_path), manifest())
    # On the writer thread, where save_payload is patched (a real full disk in
    # the writer process: test_write_failures).
    w = RecordingWriter(
        str(tmp_path), shard=0, num_shards=1, steps_per_epoch=10, writer_process=False
    )
    for step in range(5):  # what training submits goes on being accepted
        w.submit_batch(step, [traj(step)])
        w.submit_stats(step, {"loss": float(step)})
    w.close()
    logger.removeHandler(handler)
    reader = RecordingReader(str(tmp_path))
    assert reader.available_steps() == [0, 1]
    assert_batches_equal([traj(1)], reader.load_shard(1, 0))
    (stop,) = reader.stopped()
    assert stop["step"] == 2 and "No space left" in stop["error"]
    assert stop["writing"] == "batch"
    # Nothing of the failed step or the dropped ones is left half-visible.
    assert not (tmp_path / step_dirname(3)).exists()
    # One error, logged once, saying what happened and that training goes on.
    (error,) = errors
    assert "stopped recording at step 2 (shard 0) writing its batch" in error
    assert "step 2 and later are not recorded" in error
    assert "Training goes on" in error and "fail_on_write_error" in error
    with pytest.raises(RecordingError, match="stopped at step 2: writing shard 0"):
        reader.require_steps(range(4))
    assert main(["verify", str(tmp_path)]) == 0


def test_only_batches_wait_for_the_writer(tmp_path, monkeypatch):
    """``max_pending`` bounds steps (their batches), not files: while a step's
    batch is being written, its pin and statistics are queued at once; the next
    step's batch waits for a free place."""
    import threading

    from areal_debug.recording.writer.payload_file import save_payload

    started, release = threading.Event(), threading.Event()
    real = save_payload

    def held(*args, **kwargs):
        started.set()
        release.wait(60)
        return real(*args, **kwargs)

    patch_writer(monkeypatch, "save_payload", held)
    write_manifest(str(tmp_path), manifest())
    w = RecordingWriter(
        str(tmp_path),
        shard=0,
        num_shards=1,
        steps_per_epoch=10,
        max_pending=1,
        writer_process=False,
    )
    try:
        w.submit_batch(0, [traj(0)])
        assert started.wait(60)  # the writer is inside step 0's payload

        def small_files():
            w.submit_pin(0, ["test"], [0])
            w.submit_stats(0, {"loss": 0.0})

        small = threading.Thread(target=small_files)
        small.start()
        small.join(60)
        assert not small.is_alive(), "a step's small files waited for its batch"
        nxt = threading.Thread(target=w.submit_batch, args=(1, [traj(1)]))
        nxt.start()
        nxt.join(0.5)
        assert nxt.is_alive(), "a second pending batch did not wait (max_pending=1)"
    finally:
        release.set()
    nxt.join(60)
    w.close()
    reader = RecordingReader(str(tmp_path))
    assert reader.available_steps() == [0, 1]
    assert reader.recorded_stats(0) == {"loss": 0.0}


def test_a_stop_after_a_steps_batch_keeps_the_step_and_says_what_it_lacks(
    tmp_path, capsys, monkeypatch
):
    """The disk fills while a step's statistics are written, after its batch is
    whole: the step stays replayable without them, and the marker, the log and
    `inspect` say so instead of calling the step not recorded."""
    import errno

    from areal_debug.cli import main
    from areal_debug.recording.atomic import atomic_write_json

    real = atomic_write_json

    def full_at_stats_of_step_2(path, obj):
        if path.endswith(os.path.join(step_dirname(2), "stats.json")):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, obj)

    write_manifest(str(tmp_path), manifest())
    w = RecordingWriter(
        str(tmp_path), shard=0, num_shards=1, steps_per_epoch=10, writer_process=False
    )
    patch_writer(monkeypatch, "atomic_write_json", full_at_stats_of_step_2)
    for step in range(4):
        w.submit_batch(step, [traj(step)])
        w.submit_stats(step, {"loss": float(step)})
    w.close()
    monkeypatch.undo()
    reader = RecordingReader(str(tmp_path))
    assert reader.available_steps() == [0, 1, 2]
    assert reader.recorded_stats(2) is None and reader.recorded_stats(1) == {
        "loss": 1.0
    }
    (stop,) = reader.stopped()
    assert (stop["step"], stop["writing"]) == (2, "stats")
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "step 2 without its statistics (stats.json)" in out


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
    from areal_debug.recording.writer.payload_rules import describe_batch

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
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest
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

    from areal_debug.modes.engines import ReplayTeacher
    from areal_debug.recording.format import teacher_payload_name

    TEACHER_LOGP = teacher_payload_name("zstd")

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
    assert reader.step_meta(0).teacher_logp.num_trajectories == 2
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


def _padded_rlvr_batch(n: int = 8, vocab: int = 151_000) -> list[dict]:
    """Groups right-padded to their longest response, as AReaL batches are."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        prompt, longest = 64 + 8 * i, 512
        resp = torch.randint(16, longest, (4,), generator=g)
        length = prompt + int(resp.max())
        t = traj(i, group=4, length=length)
        t["input_ids"] = torch.randint(0, vocab, (4, length), generator=g)
        for row, r in enumerate(resp.tolist()):
            t["input_ids"][row, prompt + r :] = 0
            t["attention_mask"][row, prompt + r :] = False
            t["logprobs"][row, prompt + r :] = 0.0
        out.append(t)
    return out


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_each_codec_round_trips_bitwise(tmp_path, codec):
    batch = _padded_rlvr_batch()
    write_manifest(str(tmp_path), manifest())
    w = RecordingWriter(
        str(tmp_path), shard=0, num_shards=1, steps_per_epoch=10, compression=codec
    )
    w.submit_batch(0, batch)
    w.close()
    reader = RecordingReader(str(tmp_path))
    entry = reader.step_meta(0).shards[0].entry
    assert entry.codec == codec
    assert entry.file == shard_payload_name(0, codec)
    on_disk = (tmp_path / step_dirname(0) / entry.file).read_bytes()
    # The checksum and size are those of the bytes on disk.
    assert entry.sha256 == sha256_bytes(on_disk) and entry.bytes == len(on_disk)
    buf = io.BytesIO()
    # The payload: its tensors packed per dtype, saved by the writer process
    # without the zip's CRC32 (the sha256 covers the file).
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(pack(batch), buf)
    finally:
        torch.serialization.set_crc32_options(True)
    assert entry.raw_bytes == len(buf.getvalue())
    if codec == "zstd":
        # Padding, and 18-bit token ids in int64, compress (0.24 measured on this
        # small, lightly padded batch; benchmarks/compression.py measures the
        # realistic one).
        assert entry.bytes < 0.3 * entry.raw_bytes
    else:
        assert on_disk == buf.getvalue()
    assert_batches_equal(batch, reader.load_shard(0, 0))


def test_a_version_1_shard_without_codec_still_loads(tmp_path):
    """v1 metadata has no codec or raw_bytes, and its payload is plain torch.save."""
    batch = [traj(1)]
    m = manifest()
    m["format_version"] = 1
    write_manifest(str(tmp_path), m)
    w = RecordingWriter(
        str(tmp_path), shard=0, num_shards=1, steps_per_epoch=10, compression="none"
    )
    w.submit_batch(0, batch)
    w.close()
    step = tmp_path / step_dirname(0)
    meta = json.loads((step / STEP_META).read_text())
    for key in ("codec", "raw_bytes"):
        del meta["shards"][0][key]
    meta["format_version"] = 1
    (step / STEP_META).write_text(json.dumps(meta))
    assert_batches_equal(batch, RecordingReader(str(tmp_path)).load_shard(0, 0))


def _edit_shard_meta(tmp_path, **changes) -> None:
    step = tmp_path / step_dirname(0)
    meta = json.loads((step / STEP_META).read_text())
    meta["shards"][0].update(changes)
    (step / STEP_META).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "changes, message, named",
    [
        (
            {"codec": "lz4"},
            "uses codec 'lz4', which this areal-debug does not read",
            shard_payload_name(0, "zstd"),
        ),
        # Refused with the step metadata, before the payload is opened.
        ({"raw_bytes": None}, r"shards\[0\].raw_bytes is None", STEP_META),
        # A payload that would inflate beyond what its metadata says is refused:
        # it stops at the size the metadata gives.
        (
            {"raw_bytes": 100},
            "inflates beyond the 100 bytes its metadata says",
            shard_payload_name(0, "zstd"),
        ),
    ],
)
def test_codec_metadata_problems_are_named(tmp_path, changes, message, named):
    record(str(tmp_path), {0: [[traj(1)]]})
    _edit_shard_meta(tmp_path, **changes)
    with pytest.raises(RecordingError, match=message) as e:
        RecordingReader(str(tmp_path)).load_shard(0, 0)
    assert named in str(e.value)


def test_damaged_compressed_bytes_with_a_matching_checksum_are_named(tmp_path):
    record(str(tmp_path), {0: [[traj(1)]]})
    payload = tmp_path / step_dirname(0) / shard_payload_name(0, "zstd")
    data = b"not a zstd frame" + payload.read_bytes()[16:]
    payload.write_bytes(data)
    _edit_shard_meta(tmp_path, sha256=sha256_bytes(data))
    with pytest.raises(RecordingError, match="Cannot decompress .*damaged"):
        RecordingReader(str(tmp_path)).load_shard(0, 0)
