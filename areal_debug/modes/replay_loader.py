# SPDX-License-Identifier: Apache-2.0
"""ReplayDataLoader: the trainer's dataloader in replay mode."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from areal_debug.recording.reader import RecordingReader, reshard
from areal_debug.replay_plan import samples_of


class ReplayDataLoader:
    """Yields this data-parallel head's recorded batch of each step, in order.

    ``len()`` is the recorded steps per epoch, so AReaL's trainer runs the same
    schedule (and LR schedule) as the dump run. Iterating runs from the current
    position to the end of its epoch, like a dataloader's epoch. The position
    is the only state (torchdata's Stateful protocol, plain JSON values), so
    AReaL's RecoverHandler saves and restores it with its checkpoints.
    """

    def __init__(
        self,
        reader: RecordingReader,
        dp_rank: int,
        dp_size: int,
        drops: dict[int, dict[int, frozenset[int] | None]] | None = None,
    ):
        self.reader = reader
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        # debug.drop_samples: {step: {group: samples or None (all)}}.
        self.drops = drops or {}
        self.next_step = 0
        # AReaL reads batch_size off dataloaders in a few places (e.g. online mode).
        self.batch_size = None
        # Seconds the training loop waited for each step's data (the replay
        # report shows them); the next step is read while the current one trains.
        self.waits: dict[int, float] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._prefetched: dict[int, Future] = {}

    def __len__(self) -> int:
        return self.reader.steps_per_epoch

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        epoch_end = (self.next_step // len(self) + 1) * len(self)
        while self.next_step < epoch_end:
            step = self.next_step
            pending = self.prefetch(step)
            t0 = time.perf_counter()
            batch = pending.result()
            self.waits[step] = time.perf_counter() - t0
            del self._prefetched[step]
            # Advance before yielding: a state_dict() taken after this step
            # was consumed must point at the next one.
            self.next_step = step + 1
            if self.reader.has_step(step + 1):
                self.prefetch(step + 1)
            yield batch

    def prefetch(self, step: int) -> Future:
        """Start reading ``step`` in the background (once); its Future."""
        if step not in self._prefetched:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="replay-read")
            self._prefetched[step] = self._pool.submit(self._load, step)
        return self._prefetched[step]

    def _load(self, step: int) -> list[dict[str, Any]]:
        """This head's part of the step, less the samples dropped from it."""
        if step not in self.drops:
            return self.reader.load_for_head(step, self.dp_rank, self.dp_size)
        shards = [
            self.reader.load_shard(step, shard)
            for shard in range(self.reader.num_shards)
        ]
        kept, first = [], 0
        for shard in shards:
            # The groups keep their recorded numbering across the shards.
            kept.append(_without(shard, self.drops[step], first))
            first += len(shard)
        if self.dp_size == self.reader.num_shards:
            return kept[self.dp_rank]  # each head its recorded groups, less drops
        whole = [traj for shard in kept for traj in shard]
        return reshard(
            whole,
            self.dp_rank,
            self.dp_size,
            step=step,
            num_shards=self.reader.num_shards,
        )

    def close(self) -> None:
        self._prefetched.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def state_dict(self) -> dict[str, Any]:
        return {"next_step": self.next_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        if "next_step" not in state_dict:
            raise ValueError(
                "ReplayDataLoader.load_state_dict got a state without 'next_step' "
                f"(keys: {sorted(state_dict)}): it was saved by another dataloader, "
                "e.g. a recover checkpoint of the dump run, not by a replay."
            )
        self.next_step = int(state_dict["next_step"])
        # Read ahead from the restored position (a recover checkpoint's).
        self._prefetched = {
            k: v for k, v in self._prefetched.items() if k >= self.next_step
        }


def _without(
    groups: list[dict[str, Any]], drops: dict[int, frozenset[int] | None], first: int
) -> list[dict[str, Any]]:
    """``groups`` (numbered from ``first``) less the dropped ones and the dropped
    samples (rows) of the others."""
    out = []
    for i, traj in enumerate(groups):
        dropped = drops.get(first + i, frozenset())
        if dropped is None:
            continue
        out.append(_rows_without(traj, dropped) if dropped else traj)
    return out


def _rows_without(traj: dict[str, Any], rows: frozenset[int]) -> dict[str, Any]:
    """A group's dict without the rows ``rows``: every tensor whose first dimension
    is its samples is cut; the rest is kept as recorded."""
    import torch

    n = samples_of(traj)
    keep = torch.tensor([r for r in range(n) if r not in rows], dtype=torch.long)
    return {
        key: value.index_select(0, keep)
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == n
        else value
        for key, value in traj.items()
    }
