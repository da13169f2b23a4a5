# SPDX-License-Identifier: Apache-2.0
"""ReplayDataLoader (Stateful protocol) and the engines standing in for AReaL's."""

import json

import pytest
import torch
from test_store import record, traj

from areal_debug.modes.engines import RecordingEngine, ReplayEngine
from areal_debug.modes.replay_loader import ReplayDataLoader
from areal_debug.recording.reader import RecordingReader


@pytest.fixture
def reader(tmp_path):
    # 2 epochs of 3 steps, one head; step k's batch is traj(k).
    record(str(tmp_path), {k: [[traj(k)]] for k in range(6)}, steps_per_epoch=3)
    return RecordingReader(str(tmp_path))


def ids(batch):
    return batch[0]["input_ids"]


def test_len_is_recorded_steps_per_epoch(reader):
    assert len(ReplayDataLoader(reader, 0, 1)) == 3


def test_iterates_one_epoch_at_a_time_in_order(reader):
    loader = ReplayDataLoader(reader, 0, 1)
    first = list(loader)
    second = list(loader)
    assert len(first) == 3 and len(second) == 3
    for k, batch in enumerate(first + second):
        assert torch.equal(ids(batch), traj(k)["input_ids"])


def test_state_round_trips_through_json(reader):
    loader = ReplayDataLoader(reader, 0, 1)
    it = iter(loader)
    next(it)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state == {"next_step": 2}
    resumed = ReplayDataLoader(reader, 0, 1)
    resumed.load_state_dict(state)
    assert torch.equal(ids(next(iter(resumed))), traj(2)["input_ids"])


def test_empty_state_is_a_no_op(reader):
    loader = ReplayDataLoader(reader, 0, 1)
    next(iter(loader))
    loader.load_state_dict({})
    assert loader.state_dict() == {"next_step": 1}


def test_foreign_state_is_refused_clearly(reader):
    with pytest.raises(ValueError, match="without 'next_step'"):
        ReplayDataLoader(reader, 0, 1).load_state_dict({"_sampler_iter_yielded": 3})


def test_replay_engine_returns_steps_across_epochs(reader):
    loader = ReplayDataLoader(reader, 0, 1)
    engine = ReplayEngine(loader)
    for k in range(6):
        assert torch.equal(
            ids(engine.prepare_batch(loader, workflow=object())), traj(k)["input_ids"]
        )
    assert loader.state_dict() == {"next_step": 6}


def test_replay_engine_weight_sync_is_a_completed_no_op(reader):
    engine = ReplayEngine(ReplayDataLoader(reader, 0, 1))
    assert engine.update_weights_from_disk(None).result(timeout=0) is None
    engine.set_version(5)
    assert engine.get_version() == 5 and engine.export_stats() == {}


def test_replay_engine_refuses_another_dataloader_and_unknown_calls(reader):
    engine = ReplayEngine(ReplayDataLoader(reader, 0, 1))
    with pytest.raises(TypeError, match="ReplayDataLoader"):
        engine.prepare_batch([[{"prompt": "x"}]])
    with pytest.raises(AttributeError, match="no inference engine exists"):
        engine.submit({}, None)


def test_recording_engine_passes_batches_through_and_delegates():
    seen = []

    class Engine:
        version = 3

        def prepare_batch(self, dataloader, **kw):
            return [traj(dataloader)]

        def get_version(self):
            return self.version

    wrapped = RecordingEngine(Engine(), seen.append)
    out = wrapped.prepare_batch(7, workflow=None)
    assert seen == [out] and torch.equal(ids(out), traj(7)["input_ids"])
    assert wrapped.get_version() == 3


def test_replay_skips_evaluation_with_one_log_line():
    import logging

    from areal_debug.modes import replay as replay_module
    from areal_debug.modes.replay import ReplayMode
    from areal_debug.modes.topology import SpmdTopology

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    replay_module.logger.addHandler(handler)

    def areal_evaluate(*args):
        raise AssertionError("AReaL's evaluation ran in replay mode")

    try:
        # Only the state evaluate reads: no engines are needed to test the skip.
        mode = ReplayMode(trainer=None, debug=None, topology=SpmdTopology())
        for step in range(3):
            assert mode.evaluate(areal_evaluate, object(), None, 0, step, step) is None
    finally:
        replay_module.logger.removeHandler(handler)
    skipped = [r for r in records if "evaluation rollouts skipped" in r.getMessage()]
    assert len(skipped) == 1


def test_next_step_is_read_while_the_current_one_trains(reader, monkeypatch):
    loader = ReplayDataLoader(reader, 0, 1)
    reads = []
    load = reader.load_for_head
    monkeypatch.setattr(
        reader,
        "load_for_head",
        lambda step, *a: (reads.append(step), load(step, *a))[1],
    )
    batches = iter(loader)
    first = next(batches)
    assert torch.equal(ids(first), traj(0)["input_ids"])
    loader.prefetch(1).result(timeout=30)  # already under way: not read again
    assert reads == [0, 1]
    assert torch.equal(ids(next(batches)), traj(1)["input_ids"])
    loader.prefetch(2).result(timeout=30)
    assert reads == [0, 1, 2] and set(loader.waits) == {0, 1}
    loader.close()


def test_prefetch_stops_at_the_last_recorded_step_and_follows_a_restore(tmp_path):
    record(str(tmp_path), {k: [[traj(k)]] for k in range(2)}, steps_per_epoch=5)
    loader = ReplayDataLoader(RecordingReader(str(tmp_path)), 0, 1)
    loader.prefetch(0)
    loader.load_state_dict({"next_step": 1})
    assert torch.equal(ids(next(iter(loader))), traj(1)["input_ids"])
    assert 2 not in loader._prefetched  # step 2 was never recorded: not read
    loader.close()
