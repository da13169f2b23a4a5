# SPDX-License-Identifier: Apache-2.0
"""What areal-debug needs in AReaL's single-controller mode (``scheduler.type: local``).

There the trainer process is a controller: the rollout controller's
``prepare_batch`` returns trajectory dicts of ``RTensor`` (references to tensors
held by the rollout workers), and the train controller dispatches them to its
workers. A recording is taken right there, one shard per step in generation
order: the referenced tensors are fetched on a background thread while the step
trains. A replay hands the train controller RTensors that carry the recorded
tensors inline, so it orders and splits the batch exactly as in the dump run.
Also here: attaching rollout workers to running servers, and ending the RPC
workers on every exit path.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from areal.api.io_struct import LocalInfServerInfo
from areal.infra.rpc.rtensor import RTensor, TensorShardInfo, get_backend
from areal.utils import logging

logger = logging.getLogger("DebugSingleController")

SERVER_ADDRS_ENV = "AREAL_LLM_SERVER_ADDRS"


def server_infos_from_env(n_servers: int) -> list[LocalInfServerInfo] | None:
    """Already-running inference servers named by ``AREAL_LLM_SERVER_ADDRS``.

    In SPMD mode AReaL's launchers pass server addresses in this variable; in
    single-controller mode AReaL launches its own servers unless told where
    they run. ``None`` when the variable is unset.
    """
    raw = os.environ.get(SERVER_ADDRS_ENV, "").strip()
    if not raw:
        return None
    addrs = [a.strip() for a in raw.split(",") if a.strip()]
    if len(addrs) != n_servers:
        raise ValueError(
            f"{SERVER_ADDRS_ENV}={raw!r} names {len(addrs)} server(s), but the "
            f"rollout allocation has {n_servers} data-parallel instance(s): each "
            "rollout worker attaches to one server. Give one host:port per "
            f"instance, or unset {SERVER_ADDRS_ENV} to let AReaL launch servers."
        )
    infos = []
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(
                f"{SERVER_ADDRS_ENV} entry {addr!r} is not host:port (e.g. "
                "127.0.0.1:30000)."
            )
        infos.append(LocalInfServerInfo(host=host, port=int(port), process=None))
    return infos


def localized_copy(value: Any) -> Any:
    """A copy of a batch with every ``RTensor`` replaced by a fetched plain tensor.

    AReaL's ``RTensor.localize`` would fill the RTensors in place (and the
    controller's fetch cache), changing what the train controller then sends
    to its workers; this fetches the same bytes into fresh tensors instead and
    leaves the batch as it was.
    """
    pending: list[RTensor] = []
    _collect_remote(value, pending)
    fetched = get_backend().fetch([rt.shard for rt in pending]) if pending else []
    by_id = {id(rt): t for rt, t in zip(pending, fetched, strict=True)}
    return _rebuild(value, by_id)


def _collect_remote(value: Any, out: list[RTensor]) -> None:
    if isinstance(value, RTensor):
        if value.data.is_meta:
            out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_remote(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect_remote(v, out)


def _map_leaves(value: Any, leaf) -> Any:
    """``value`` with every non-container leaf replaced by ``leaf(leaf_value)``."""
    if isinstance(value, dict):
        return {k: _map_leaves(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_leaves(v, leaf) for v in value]
    if isinstance(value, tuple):
        return tuple(_map_leaves(v, leaf) for v in value)
    return leaf(value)


def _rebuild(value: Any, fetched: dict[int, torch.Tensor]) -> Any:
    def leaf(v: Any) -> Any:
        if isinstance(v, RTensor):
            found = fetched.get(id(v))
            return found if found is not None else v.data.detach().clone()
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        return v

    return _map_leaves(value, leaf)


def record_controller_batches(controller: Any, on_batch) -> None:
    """Hand each batch the rollout controller returns to ``on_batch``.

    The methods are replaced on the instance, not wrapped in another object:
    AReaL checks ``isinstance(trainer.rollout, RolloutController)``.
    """
    for name in ("prepare_batch", "rollout_batch"):
        original = getattr(controller, name)

        def recorded(*args, _original=original, **kwargs):
            batch = _original(*args, **kwargs)
            on_batch(batch)
            return batch

        setattr(controller, name, recorded)


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
        containers = _map_leaves(batch, lambda v: v)
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
                    "Fetching the step's rollout batch from the rollout workers "
                    f"for the recording failed: {error!r}. The workers' storage "
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
    return [_inline(_compact(traj)) for traj in batch]


def _compact(traj: Any) -> Any:
    # The same padding trim as RTensor.remotize (a no-op on single-controller
    # recordings, which were stored trimmed).
    mask = traj.get("attention_mask") if isinstance(traj, dict) else None
    if isinstance(mask, torch.Tensor) and mask.ndim >= 2:
        from areal.utils.data import split_and_unpad_tensor

        compacted = split_and_unpad_tensor(
            traj, n_trajs=1, traj_group_sizes=[mask.shape[0]]
        )
        if compacted is not None:
            return compacted[0]
    return traj


def _inline(value: Any) -> Any:
    def leaf(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        shard = TensorShardInfo(
            shard_id=f"{_REPLAY_SHARD}{uuid.uuid4().hex}", node_addr=REPLAY_NODE
        )
        return RTensor(shard=shard, data=v)

    return _map_leaves(value, leaf)


def _is_replay_shard(value: Any) -> bool:
    return isinstance(value, RTensor) and str(value.shard.shard_id).startswith(
        _REPLAY_SHARD
    )


def without_inline_rtensors(value: Any) -> Any:
    """The structure with replay-made RTensors replaced by their data, so that
    AReaL's ``clear_batches`` only clears shards some worker really stores."""
    return _map_leaves(value, lambda v: v.data if _is_replay_shard(v) else v)


class WorkerReaper:
    """Makes sure the RPC workers a controller started end with it.

    AReaL deletes its workers in ``PPOTrainer.close()``; a failure in
    ``__init__`` (no ``close()``), an exception inside ``close()``, or a
    SIGTERM to the controller (no Python cleanup at all) would leave them
    running. The reaper deletes whatever the scheduler still holds, once, on
    any of these paths; SIGTERM is turned into ``SystemExit`` so the normal
    cleanup runs first.
    """

    def __init__(self):
        self._scheduler = None
        self._done = False
        atexit.register(self.reap)
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGTERM)
            if previous in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def watch(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    def reap(self) -> None:
        if self._done or self._scheduler is None:
            return
        self._done = True
        try:
            if getattr(self._scheduler, "_workers", None):
                logger.info("Ending the RPC workers this controller started.")
            self._scheduler.delete_workers()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            logger.warning(f"Could not delete the RPC workers: {e!r}")


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)
