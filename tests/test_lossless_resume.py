# SPDX-License-Identifier: Apache-2.0
"""debug.lossless_resume's parts without a trainer: the ledger of what was drawn
and not trained, and the train dataloader that keeps it in its state and serves
it first. AReaL's own dispatcher drives them in tests/test_areal_contract.py
(section draws), a real interrupted run in tests/test_demo.py."""

import threading
from types import SimpleNamespace

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from areal_debug import areal_compat
from areal_debug.config import DebugConfigError
from areal_debug.lossless_resume import DrawLedger, LosslessResume


class Dispatcher:
    """BatchTaskDispatcher's parts the ledger reads and patches."""

    def __init__(self):
        self._active_task_ids: set[int] = set()
        self._result_cv = threading.Condition()

    def submit_task_input(self, task_input):
        self._active_task_ids.add(task_input.task_id)


def loader(rows):
    return StatefulDataLoader(rows, batch_size=2, collate_fn=lambda x: x)


def test_the_ledger_keeps_what_no_step_trained_in_draw_order():
    rows = [{"row": i} for i in range(6)]
    ledger, dispatcher = DrawLedger(), Dispatcher()
    patches = areal_compat.MethodPatches()
    ledger.watch(dispatcher, patches)
    ledger.yielded(rows[:2])
    ledger.yielded(rows[2:4])
    for task_id, row in enumerate(rows[:3]):
        dispatcher.submit_task_input(SimpleNamespace(task_id=task_id, data=row))
    # Task 0 handed to a step (or rejected), 1 and 2 running or waiting; row 3
    # yielded, not yet submitted.
    dispatcher._active_task_ids.discard(0)
    assert ledger.untrained() == rows[1:4]
    dispatcher._active_task_ids.clear()
    assert ledger.untrained() == [rows[3]]
    patches.remove_all()
    assert "submit_task_input" not in vars(dispatcher)


def test_a_restored_loader_serves_the_untrained_first_then_its_position():
    rows = [{"row": i} for i in range(8)]
    first = areal_compat.serve_untrained_first(loader(rows), DrawLedger())
    it = iter(first)
    drawn = [next(it), next(it)]
    state = first.state_dict()
    # Nothing was submitted: both batches are untrained, in draw order.
    assert state[areal_compat.UNTRAINED_KEY] == drawn[0] + drawn[1]
    assert state[areal_compat.EPOCH_KEY] == 0
    assert areal_compat.batches_drawn(state) == 2
    again = areal_compat.serve_untrained_first(loader(rows), DrawLedger())
    again.load_state_dict(state)
    assert areal_compat.untrained_served_first(again) == 4
    assert isinstance(again, StatefulDataLoader) and len(again) == 4
    assert list(again) == [drawn[0] + drawn[1], rows[4:6], rows[6:8]]


def test_a_restored_loader_passes_a_plain_state_on():
    """A recover checkpoint saved without debug.lossless_resume restores as
    AReaL's own would."""
    rows = [{"row": i} for i in range(8)]
    plain = loader(rows)
    it = iter(plain)
    next(it)
    again = areal_compat.serve_untrained_first(loader(rows), DrawLedger())
    again.load_state_dict(plain.state_dict())
    assert list(again) == [rows[2:4], rows[4:6], rows[6:8]]


@pytest.mark.parametrize("key", ["rollout", "actor"])
def test_v2_controllers_are_refused_before_the_trainer_starts(key):
    config = SimpleNamespace(
        rollout=SimpleNamespace(_version="v1"), actor=SimpleNamespace(_version="v1")
    )
    setattr(getattr(config, key), "_version", "v2")
    with pytest.raises(DebugConfigError) as e:
        LosslessResume(trainer=None).prepare(config)
    assert f"debug.lossless_resume=true with {key}._version=v2" in str(e.value)
    assert "AReaL's recovery does not support its v2 controllers" in str(e.value)


def test_a_saved_state_is_read_as_plain_values_and_nothing_is_called(tmp_path):
    """dataloader_info.pkl is AReaL's pickle: the resume check reads its plain
    values; a class named in it (a sampler's generator, an OrderedDict, a class
    whose construction would run code) is never imported or called."""
    import collections
    import pickle

    ran = tmp_path / "ran"

    class Loud:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    state = {
        "_num_yielded": 3,
        "ordered": collections.OrderedDict(a=1),
        "loud": Loud(),
        areal_compat.UNTRAINED_KEY: [{"row": 1}],
    }
    path = tmp_path / "dataloader_info.pkl"
    path.write_bytes(pickle.dumps([state, state]))
    first, second = areal_compat.read_dataloader_states(str(path))
    assert areal_compat.batches_drawn(first) == 3
    assert first[areal_compat.UNTRAINED_KEY] == [{"row": 1}]
    assert not ran.exists()
