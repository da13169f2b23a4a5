# SPDX-License-Identifier: Apache-2.0
"""Between recorded tensors and AReaL's RTensors (single-controller mode).

There the rollout controller's ``prepare_batch`` returns trajectory dicts of
``RTensor`` (references to tensors held by the rollout workers) and the train
controller dispatches them to its workers. A dump fetches the referenced tensors
into fresh ones on a background thread while the step trains. A replay hands
the train controller RTensors that carry the recorded tensors inline, so it
orders and splits the batch exactly as in the dump run.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from areal_debug.areal_compat import (
    fetch_rtensor_shards,
    rtensor_types,
    unpad_trajectory,
)


def map_leaves(value: Any, leaf) -> Any:
    """``value`` with every non-container leaf replaced by ``leaf(leaf_value)``."""
    if isinstance(value, dict):
        return {k: map_leaves(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [map_leaves(v, leaf) for v in value]
    if isinstance(value, tuple):
        return tuple(map_leaves(v, leaf) for v in value)
    return leaf(value)


def localized_copy(value: Any) -> Any:
    """A copy of a batch with every ``RTensor`` replaced by a fetched plain tensor.

    AReaL's ``RTensor.localize`` would fill the RTensors in place (and the
    controller's fetch cache), changing what the train controller then sends
    to its workers; this fetches the same bytes into fresh tensors instead and
    leaves the batch as it was.
    """
    RTensor, _ = rtensor_types()
    pending: list = []
    map_leaves(
        value,
        lambda v: pending.append(v) if isinstance(v, RTensor) and v.data.is_meta else v,
    )
    fetched = fetch_rtensor_shards([rt.shard for rt in pending]) if pending else []
    by_id = {id(rt): t for rt, t in zip(pending, fetched, strict=True)}

    def leaf(v: Any) -> Any:
        if isinstance(v, RTensor):
            found = by_id.get(id(v))
            return found if found is not None else v.data.detach().clone()
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        return v

    return map_leaves(value, leaf)


class BatchFetcher:
    """Fetches batches' RTensors on a background thread while the step trains.

    The referenced tensors stay on the rollout workers until AReaL's
    ``clear_batches`` at the end of the step, so the training thread only has to
    ``wait()`` there, by which time the fetch is normally long done.
    """

    def __init__(self):
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="areal-debug-fetch"
        )
        self._pending: list[Future] = []

    def submit(self, batch: Any) -> Future:
        # The trainer adds keys to these dicts right away: the fetch thread
        # walks its own copy of the containers.
        containers = map_leaves(batch, lambda v: v)
        future = self._pool.submit(localized_copy, containers)
        self._pending.append(future)
        return future

    def wait(self) -> None:
        """Block until every submitted fetch is done; raise the first failure."""
        pending, self._pending = self._pending, []
        for future in pending:
            error = future.exception()
            if error is not None:
                raise RuntimeError(
                    "Fetching the step's rollout batch (or teacher log-probs) from "
                    f"the workers for the recording failed: {error!r}. The workers' storage "
                    "must stay reachable from the controller."
                ) from error

    def close(self) -> None:
        self._pool.shutdown(wait=True)


# Replay hands the train controller RTensors that carry their data inline. AReaL
# balances a batch over the train workers by each trajectory's weight, which for
# an RTensor is its (padding-trimmed) size and for a plain tensor its token
# count; even at one worker that weight orders the trajectories, and so the
# minibatches. Presenting what the dump run's controller saw keeps it bitwise.
REPLAY_NODE = "areal-debug-replay-keeps-no-storage:0"
_REPLAY_SHARD = "areal-debug-replay/"


def as_inline_rtensors(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wrap each recorded trajectory as the rollout controller would return it."""
    return [inline_rtensors(_compact(traj)) for traj in batch]


def _compact(traj: Any) -> Any:
    # The same padding trim as RTensor.remotize (a no-op on single-controller
    # recordings, which were stored trimmed).
    mask = traj.get("attention_mask") if isinstance(traj, dict) else None
    if isinstance(mask, torch.Tensor) and mask.ndim >= 2:
        compacted = unpad_trajectory(traj)
        if compacted is not None:
            return compacted
    return traj


def inline_rtensors(value: Any) -> Any:
    """Every tensor in ``value`` as an RTensor carrying it inline."""
    RTensor, TensorShardInfo = rtensor_types()

    def leaf(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        shard = TensorShardInfo(
            shard_id=f"{_REPLAY_SHARD}{uuid.uuid4().hex}", node_addr=REPLAY_NODE
        )
        return RTensor(shard=shard, data=v)

    return map_leaves(value, leaf)


def _is_replay_shard(value: Any) -> bool:
    RTensor, _ = rtensor_types()
    return isinstance(value, RTensor) and str(value.shard.shard_id).startswith(
        _REPLAY_SHARD
    )


def without_inline_rtensors(value: Any) -> Any:
    """The structure with replay-made RTensors replaced by their data, so that
    AReaL's ``clear_batches`` only clears shards some worker really stores."""
    return map_leaves(value, lambda v: v.data if _is_replay_shard(v) else v)
