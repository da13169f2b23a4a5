# SPDX-License-Identifier: Apache-2.0
"""The one step counter of a debug run, checked against AReaL's ``global_step``."""

from __future__ import annotations


class StepClockError(RuntimeError):
    """areal-debug and AReaL disagree on which step is running."""


class StepClock:
    """Which global step's batch is being prepared, and which step trains.

    Started once at ``train()`` from AReaL's own start step (0, or the step
    after a restored recover checkpoint) and advanced in one place: right after
    the actor's first ``prepare_batch`` of a step returned. The inference side
    records under ``preparing`` (it runs inside that call); everything after the
    batch is ready (RNG states, statistics) belongs to ``current``.

    AReaL after main @cbff54d (#1563, ``_collect_trainable_rollout_batch``) may
    call ``prepare_batch`` several times in one step, until the batch holds a
    group for every data-parallel consumer: the step stays open (``collecting``)
    from its first call until its statistics commit (``check``), and a later
    call adds to the same step instead of starting the next one. Where AReaL's
    commit is not seen (its seam missing), each call is a step, as before.
    """

    def __init__(self) -> None:
        self.next_step = 0
        self.current: int | None = None
        # The current step's batch may still grow (no commit since it opened).
        self.collecting = False
        # False where the step's commit cannot be seen: each call is a step.
        self.closes_at_commit = True

    def start(self, step: int) -> None:
        self.next_step = step
        self.current = None
        self.collecting = False

    @property
    def preparing(self) -> int:
        """The step a ``prepare_batch`` call now running belongs to."""
        if self.collecting and self.current is not None:
            return self.current
        return self.next_step

    def advance(self) -> int | None:
        """A ``prepare_batch`` call returned: the first of a step makes that step
        current (returned); a later one of the same step returns None."""
        if self.collecting:
            return None
        self.current = self.next_step
        self.next_step += 1
        self.collecting = self.closes_at_commit
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
        self.collecting = False
