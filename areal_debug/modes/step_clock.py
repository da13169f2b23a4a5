# SPDX-License-Identifier: Apache-2.0
"""The one step counter of a debug run, checked against AReaL's ``global_step``."""

from __future__ import annotations


class StepClockError(RuntimeError):
    """areal-debug and AReaL disagree on which step is running."""


class StepClock:
    """Which global step's batch is being prepared, and which step trains.

    Started once at ``train()`` from AReaL's own start step (0, or the step
    after a restored recover checkpoint) and advanced in one place: right after
    the actor's ``prepare_batch`` returned the step's batch. The inference side
    records under ``next_step`` (it runs inside that call); everything after the
    batch is ready (RNG states, statistics) belongs to ``current``.
    """

    def __init__(self) -> None:
        self.next_step = 0
        self.current: int | None = None

    def start(self, step: int) -> None:
        self.next_step = step
        self.current = None

    def advance(self) -> int:
        """The batch of ``next_step`` is ready: that step is now current."""
        self.current = self.next_step
        self.next_step += 1
        return self.current

    def check(self, global_step: int, where: str) -> None:
        """Raise if AReaL's ``global_step`` is not the step this clock counts."""
        if global_step != self.current:
            raise StepClockError(
                f"Step mismatch at {where}: AReaL's global_step is {global_step}, "
                f"but areal-debug counted step {self.current} (its batch was the "
                f"last one prepared). A script that calls prepare_batch outside "
                "trainer.train(), or a trainer subclass that skips or repeats "
                "steps, breaks the step-to-recording mapping; record and replay "
                "through trainer.train() only."
            )
