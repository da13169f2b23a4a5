# SPDX-License-Identifier: Apache-2.0
"""The recorder's copy of a batch: off the training thread, and never altered."""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_store import assert_batches_equal, manifest, traj

from areal_debug.recording.packed_payload import unpack
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.jobs import logger
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.snapshot import (
    ChangedInPlace,
    PendingCopy,
    Snapshotter,
)
from areal_debug.recording.writer.start import write_manifest


def held_pool() -> tuple[ThreadPoolExecutor, threading.Event]:
    """A copier pool whose one thread is busy until the event is set."""
    pool = ThreadPoolExecutor(1)
    release = threading.Event()
    pool.submit(release.wait)
    return pool, release


def test_background_copy_is_a_copy_and_leaves_the_training_thread_the_originals():
    batch = [traj(0), traj(1)]
    expected = [{k: v.clone() for k, v in t.items()} for t in batch]
    snapshots = Snapshotter(clone_tensors=True)
    pending = snapshots.take(batch)
    assert isinstance(pending, PendingCopy)
    copy = unpack(pending.copied.result(timeout=30), copy=False)
    snapshots.close()
    assert_batches_equal(expected, copy)
    assert copy[0]["input_ids"].data_ptr() != batch[0]["input_ids"].data_ptr()
    batch[0]["rewards"].add_(1.0)  # after the copy: the copy keeps the original
    assert_batches_equal(expected, copy)


def test_a_change_before_the_copy_is_refused_not_recorded():
    pool, release = held_pool()
    batch = [traj(0)]
    pending = PendingCopy(batch, pool)
    batch[0]["logprobs"].mul_(2.0)
    release.set()
    with pytest.raises(ChangedInPlace, match=r"\[0\]\['logprobs'\]"):
        pending.copied.result(timeout=30)
    pool.shutdown()


def test_a_change_that_ends_after_the_copy_is_caught_by_confirm():
    batch = [traj(0)]
    with ThreadPoolExecutor(1) as pool:
        pending = PendingCopy(batch, pool)
        pending.copied.result(timeout=30)
    pending.confirm()
    batch[0]["loss_mask"].zero_()
    with pytest.raises(ChangedInPlace, match="1 tensor"):
        pending.confirm()


def test_inference_mode_tensors_need_no_version_check():
    with torch.inference_mode():
        t = {"input_ids": torch.arange(6).reshape(2, 3)}
    with ThreadPoolExecutor(1) as pool:
        copy = unpack(PendingCopy([t], pool).copied.result(timeout=30))
    assert torch.equal(copy[0]["input_ids"], t["input_ids"])


@pytest.mark.parametrize(
    "writer_process", [True, False], ids=["read-by-writer-process", "copier-thread"]
)
def test_writer_skips_a_changed_step_says_so_and_copies_on_the_thread_after(
    tmp_path, writer_process
):
    path = str(tmp_path / "rec")
    write_manifest(path, manifest())
    writer = RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=10, writer_process=writer_process
    )
    # The writer process reads the batch itself (no copier thread); without it
    # a copier thread copies, held here until the change is made.
    assert writer._reads_memory() == writer_process
    pool, release = held_pool()
    writer._snapshots._pool = pool
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        changed = [traj(0)]
        writer.submit_batch(0, changed)
        changed[0]["rewards"].fill_(7.0)  # the trainer, before the copy ran
        release.set()
        writer.flush()
        kept = [traj(1)]
        writer.submit_batch(1, kept)
        assert not writer._snapshots.background
        kept[0]["rewards"].fill_(7.0)  # too late: copied on the training thread
        writer.close()
    finally:
        logger.removeHandler(handler)
    reader = RecordingReader(path)
    assert reader.available_steps() == [1]
    assert_batches_equal([traj(1)], reader.load_shard(1, 0))
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "did not record step 0" in warnings[0] and "changed in place" in warnings[0]
    assert not list((tmp_path / "rec" / "step-000000").glob("shard-*"))


def test_packing_round_trips_any_container_exactly():
    from areal_debug.recording.packed_payload import is_packed, pack

    value = [
        {
            "ids": torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, ::2],
            "mask": torch.tensor([True, False]),
            "logp": torch.randn(2, 3, dtype=torch.bfloat16),
            "reward": torch.tensor(0.5),
            "empty": torch.zeros(0, 7),
            "weight": 0.25,
            "note": None,
            "nested": {"pair": (torch.ones(2), "text"), "list": [1, 2]},
        },
        [],
    ]
    packed = pack(value)
    assert is_packed(packed) and len(packed["buffers"]) == 4  # int64 bool bf16 f32
    back = unpack(packed)
    t0, t1 = value[0], back[0]
    for k in ("ids", "mask", "logp", "reward", "empty"):
        assert t1[k].dtype == t0[k].dtype and torch.equal(t1[k], t0[k])
    assert t1["ids"].is_contiguous() and t1["ids"].untyped_storage().nbytes() == 48
    assert (t1["weight"], t1["note"], back[1]) == (0.25, None, [])
    assert torch.equal(t1["nested"]["pair"][0], torch.ones(2))
    assert t1["nested"]["pair"][1] == "text" and t1["nested"]["list"] == [1, 2]


def test_a_packed_table_pointing_outside_its_buffer_is_refused():
    from areal_debug.recording.packed_payload import pack

    packed = pack([{"x": torch.ones(4)}])
    packed["table"][0, 1] = 2  # offset 2 + 4 elements > 4
    with pytest.raises(ValueError, match="outside its buffer"):
        unpack(packed)


def test_packed_description_matches_a_per_trajectory_count():
    from areal_debug.recording.writer.payload_rules import describe_batch

    batch = []
    for i in range(5):
        g = torch.Generator().manual_seed(i)
        length = 3 + i
        traj = {
            "attention_mask": torch.rand(2, length, generator=g) > 0.3,
            "versions": torch.randint(
                -1, 9, (2, length), generator=g, dtype=torch.int32
            ),
            "loss_mask": torch.randint(
                0, 2, (2, length), generator=g, dtype=torch.int32
            ),
            "rewards": torch.rand(2, generator=g),
            "tag": "x",
        }
        if i == 4:
            del traj["loss_mask"]  # versions then count where they are >= 0
        batch.append(traj)
    d = describe_batch(batch)
    assert d["num_trajectories"] == 5 and d["num_sequences"] == 10
    assert d["num_tokens"] == sum(int(t["attention_mask"].sum()) for t in batch)
    chosen = [t["versions"][t["loss_mask"].bool()] for t in batch[:4]]
    chosen.append(batch[4]["versions"][batch[4]["versions"] >= 0])
    allv = torch.cat(chosen)
    assert d["policy_version"] == [int(allv.min()), int(allv.max())]
    assert d["keys"] == {
        "attention_mask": "bool",
        "loss_mask": "int32",
        "rewards": "float32",
        "tag": "str",
        "versions": "int32",
    }
