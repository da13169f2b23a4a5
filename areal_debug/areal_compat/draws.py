# SPDX-License-Identifier: Apache-2.0
"""What AReaL's rollout dispatcher draws from the train dataloader, and where a
recover checkpoint keeps the dataloader's position.

``BatchTaskDispatcher.active_submit_and_wait`` (areal/infra/workflow_executor.py:635
in 1.0.4, the same in 2.0.0 and main @cbff54d) tops its queue up to
``(max_head_offpolicyness + 1) * batch_size`` inputs on every pass of a 1 s wait:
whenever a step's rollouts are not back within 1 s, it draws the next batch from
the dataloader before the step's recover checkpoint stores
``dataloader.state_dict()`` (areal/utils/recover.py:261). A resume starts after
that position: the batch drawn ahead is never trained (docs/areal-known-issues.md).

Here: the dispatcher of a rollout engine, its submissions and the task ids it has
not handed to a step yet, the dataloader position in a saved state, and a train
dataloader that keeps what was drawn and not trained in its own state and serves
it first once restored. Imports no AReaL.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

# -- the dispatcher ---------------------------------------------------------------------


def rollout_dispatcher(engine: Any) -> Any | None:
    """The ``BatchTaskDispatcher`` a rollout engine's ``prepare_batch`` draws
    through: SPMD's ``RemoteSGLangEngine.workflow_executor._dispatcher``
    (workflow_executor.py:973 in 1.0.4), single-controller's
    ``RolloutController._dispatcher`` (rollout_controller.py:220); None where
    neither is there (not initialised, or another engine)."""
    try:
        owner = getattr(engine, "workflow_executor", None) or engine
    except Exception:  # an uninitialised engine's property raises
        owner = engine
    dispatcher = getattr(owner, "_dispatcher", None)
    needed = ("submit_task_input", "_active_task_ids", "_result_cv")
    if dispatcher is None or not all(hasattr(dispatcher, n) for n in needed):
        return None
    return dispatcher


def watch_submissions(
    dispatcher: Any, patches: Any, note: Callable[[int, Any], None]
) -> None:
    """Hand each input the dispatcher is given to ``note(task_id, data)`` before
    it queues it: ``_RolloutTaskInput`` (SPMD) and ``_RemoteRolloutTaskInput``
    (single-controller) carry the dataloader's item as ``data`` (1.0.4, 2.0.0,
    main). ``patches`` is a ``MethodPatches``."""

    def make(original):
        def submit_task_input(task_input):
            note(task_input.task_id, task_input.data)
            return original(task_input)

        return submit_task_input

    patches.wrap(dispatcher, "submit_task_input", make)


def active_task_ids(dispatcher: Any) -> set[int]:
    """The tasks submitted and not yet handed to a step: queued, running, or done
    and waiting (``_active_task_ids``, added by ``submit_task_input`` and
    discarded when ``wait_results`` selects a result; workflow_executor.py:545,
    :600 in 1.0.4)."""
    with dispatcher._result_cv:
        return set(dispatcher._active_task_ids)


# -- the dataloader's position ----------------------------------------------------------
# torchdata's StatefulDataLoader.state_dict(): the batches yielded in the current
# epoch (AReaL's create_dataloader, areal/utils/dataloader.py, makes one).
BATCHES_YIELDED = "_num_yielded"
# Where a lossless-resume train dataloader keeps, in its state (so in AReaL's
# dataloader_info.pkl, written with the rest of the recover checkpoint), the
# items drawn and not trained, in the order they were drawn.
UNTRAINED_KEY = "areal_debug_untrained"
# ... and the epoch its position is in (cycle_dataloader's count is not saved).
EPOCH_KEY = "areal_debug_epoch"


def batches_drawn(state: Any) -> int | None:
    """The batches a saved dataloader state says were drawn in its epoch."""
    value = state.get(BATCHES_YIELDED) if isinstance(state, dict) else None
    return value if isinstance(value, int) else None


class _Opaque(dict):
    """What a class in a saved dataloader state is read as: nothing is called.
    Pickle fills what it builds by item (a mapping's), append and extend (a
    list's) or state: each is taken and kept out of the way."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def append(self, item):
        pass

    def extend(self, items):
        pass

    def __setstate__(self, state):
        pass


class _PlainUnpickler(pickle.Unpickler):
    """AReaL pickles the dataloader state; areal-debug reads its plain values
    only. A class or function named in it (a sampler's generator tensor) is
    never imported or called: it becomes an opaque placeholder."""

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in ("dict", "list", "tuple", "set", "int"):
            return getattr(__import__("builtins"), name)
        return _Opaque


def read_dataloader_states(path: str) -> list[dict]:
    """The dataloader states in a recover checkpoint's ``dataloader_info.pkl``:
    one per rank (SPMD, areal/utils/recover.py:58-68 in 1.0.4) or the only one."""
    with open(path, "rb") as f:
        data = _PlainUnpickler(f).load()
    states = data if isinstance(data, list) else [data]
    return [s for s in states if isinstance(s, dict)]


# -- the lossless-resume train dataloader -----------------------------------------------
def serve_untrained_first(loader: Any, ledger: Any) -> Any:
    """Make ``loader`` (the trainer's train dataloader, a StatefulDataLoader)
    resume as the uninterrupted run would have drawn:

    - its state keeps ``ledger.untrained()``; restored, it yields those items
      first, as one batch (``cycle_dataloader`` takes a batch's items one by
      one), then its own position on. Each batch it yields goes to
      ``ledger.yielded``;
    - its state keeps its epoch, and each pass over it shuffles as that epoch:
      ``cycle_dataloader`` (areal/utils/data.py:1366 in 1.0.4, 2.0.0 and main
      @cbff54d) counts epochs from 0 in every run and sets them on the
      ``DistributedSampler`` (utils/dataloader.py:47), which the restored
      position does not hold, so a plain resume in epoch e >= 1 draws epoch 0's
      order from its position on. (AReaL after cbff54d restores the epoch and
      starts cycle_dataloader's count from the sampler's: there the sampler's
      epoch is taken where the state has none.)

    Its class is swapped for a subclass made here, not wrapped: AReaL, torch and
    a user's code see the same object (``isinstance``, ``len``, ``batch_size``,
    the sampler). A mixin would not do: a base other than the loader's own
    changes the instance's layout, which ``__class__`` assignment refuses."""
    base = type(loader)

    class ServesUntrainedFirst(base):
        def __iter__(self):
            first, self._areal_debug_first = self._areal_debug_first, []
            # After cycle_dataloader's set_epoch, so the run's own epoch wins:
            # the restored one for the first pass (else the sampler's, which an
            # AReaL that restores it has set), one more for each pass after.
            if self._areal_debug_passes:
                epoch = self._areal_debug_epoch + 1
            elif self._areal_debug_epoch is not None:
                epoch = self._areal_debug_epoch
            else:
                epoch = getattr(self.sampler, "epoch", 0)
            self._areal_debug_epoch, self._areal_debug_passes = epoch, True
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            if first:
                ledger.yielded(first)
                yield first
            for batch in super().__iter__():
                ledger.yielded(batch)
                yield batch

        def state_dict(self):
            state = dict(super().state_dict())
            state[UNTRAINED_KEY] = ledger.untrained() + list(self._areal_debug_first)
            epoch = self._areal_debug_epoch
            state[EPOCH_KEY] = (
                getattr(self.sampler, "epoch", 0) if epoch is None else epoch
            )
            return state

        def load_state_dict(self, state):
            state = dict(state)
            self._areal_debug_first = list(state.pop(UNTRAINED_KEY, None) or [])
            epoch = state.pop(EPOCH_KEY, None)
            if isinstance(epoch, int):
                self._areal_debug_epoch = epoch
            return super().load_state_dict(state)

    ServesUntrainedFirst.__name__ = ServesUntrainedFirst.__qualname__ = base.__name__
    loader.__class__ = ServesUntrainedFirst
    loader._areal_debug_first = []
    # The epoch of the pass its position is in; whether a pass began here.
    loader._areal_debug_epoch = None
    loader._areal_debug_passes = False
    return loader


def untrained_served_first(loader: Any) -> int:
    """How many restored untrained items ``loader`` has yet to serve."""
    return len(getattr(loader, "_areal_debug_first", ()))
