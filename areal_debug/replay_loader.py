# SPDX-License-Identifier: Apache-2.0
"""ReplayDataLoader: the trainer's dataloader in replay mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from areal_debug.store_reader import RecordingReader


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

    def __len__(self) -> int:
        return self.reader.steps_per_epoch

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        epoch_end = (self.next_step // len(self) + 1) * len(self)
        while self.next_step < epoch_end:
            step = self.next_step
            batch = self.reader.load_for_head(step, self.dp_rank, self.dp_size)
            # Advance before yielding: a state_dict() taken after this step
            # was consumed must point at the next one.
            self.next_step = step + 1
            yield batch

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
