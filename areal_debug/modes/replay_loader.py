# SPDX-License-Identifier: Apache-2.0
"""ReplayDataLoader: the trainer's dataloader in replay mode."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from areal_debug.recording.reader import RecordingReader


class ReplayDataLoader:
    """Yields this data-parallel head's recorded batch of each step, in order.

    ``len()`` is the recorded steps per epoch, so AReaL's trainer runs the same
    schedule (and LR schedule) as the dump run. Iterating runs from the current
    position to the end of its epoch, like a dataloader's epoch. The position
    is the only state (torchdata's Stateful protocol, plain JSON values), so
    AReaL's RecoverHandler saves and restores it with its checkpoints.
    """

    def __init__(self, reader: RecordingReader, dp_rank: int, dp_size: int):
        self.reader = reader
        self.dp_rank = dp_rank
        self.dp_size = dp_size
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
            self._prefetched[step] = self._pool.submit(
                self.reader.load_for_head, step, self.dp_rank, self.dp_size
            )
        return self._prefetched[step]

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
