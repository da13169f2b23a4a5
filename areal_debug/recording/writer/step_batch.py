# SPDX-License-Identifier: Apache-2.0
"""A step's batch that arrives in parts, recorded once, as the batch the step trains.

AReaL after main @cbff54d (#1563, ``rl_trainer._collect_trainable_rollout_batch``)
calls ``prepare_batch`` until the step holds a group for every data-parallel
consumer, and trains the parts' concatenation. In single-controller mode (the
only one where that minimum exceeds 1) each part is a ``Future`` of a batch
fetched from the workers into fresh tensors: the parts are joined into one
``Future`` the writer awaits, complete when the step is sealed (its statistics
commit). In SPMD mode a later call follows only an empty result (the minimum is
1): an empty part is not a batch, the first non-empty one is the step's (copied
whole when it follows an empty one); a run that still gets a second non-empty
part records the first and says so once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from areal_debug.recording.writer.jobs import logger
from areal_debug.recording.writer.snapshot import snapshot_batch

Batch = list[dict[str, Any]]


class JoinedParts(Future):
    """The concatenation of ``Future`` parts, once sealed and every part is done."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[Future] = []
        self._sealed = False

    def add(self, part: Future) -> None:
        self._parts.append(part)

    def seal(self) -> None:
        """No more parts: resolve once each is done (the first error wins)."""
        if self._sealed:
            return
        self._sealed = True
        parts = list(self._parts)
        remaining = [len(parts)]
        lock = threading.Lock()

        def one_done(_: Future) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            batch: Batch = []
            for part in parts:
                error = part.exception()
                if error is not None:
                    self.set_exception(error)
                    return
                batch.extend(part.result())
            self.set_result(batch)

        if not parts:
            self.set_result([])
        for part in parts:
            part.add_done_callback(one_done)


class StepBatch:
    """The parts of the open step's batch, handed to ``submit(step, batch)`` once,
    at the step's first part: the writer keeps the step's files in order."""

    def __init__(self, submit: Callable[[int, Batch | Future], None]) -> None:
        self._submit = submit
        self._step: int | None = None
        self._joined: JoinedParts | None = None
        # SPMD: the step's batch to come after an empty first part.
        self._awaited: Future | None = None
        self._submitted = False
        self._warned = False

    def add(self, step: int, part: Batch | Future) -> None:
        """A part of step ``step``'s batch, as one ``prepare_batch`` call gave it."""
        if step != self._step:
            self.seal()
            self._step = step
        if isinstance(part, Future):
            if self._joined is None:
                self._joined = JoinedParts()
                self._submit(step, self._joined)
            self._joined.add(part)
        elif not self._submitted:
            self._submitted = True
            if part:
                self._submit(step, part)
            else:
                # Nothing trainable in this call; the step's batch is to come.
                self._awaited = Future()
                self._submit(step, self._awaited)
        elif part and self._awaited is not None and not self._awaited.done():
            # Copied whole, now: the trainer may change these very tensors.
            self._awaited.set_result(snapshot_batch(part, clone_tensors=True))
        elif part:
            self._say_first_part_only(step)

    def _say_first_part_only(self, step: int) -> None:
        if self._warned:
            return
        self._warned = True
        logger.error(
            f"Step {step}'s batch came from several prepare_batch calls with groups "
            "in each (SPMD mode): the recording holds the first call's only, and a "
            "replay of such a step trains on fewer groups. Record in "
            "single-controller mode (scheduler.type=local), where the parts are "
            "recorded as one batch."
        )

    def seal(self) -> None:
        """The open step's batch is complete (its statistics commit, or the run
        ends): joined parts resolve, an awaited batch that never came is empty."""
        if self._joined is not None:
            self._joined.seal()
        if self._awaited is not None and not self._awaited.done():
            self._awaited.set_result([])
        self._step, self._joined, self._awaited = None, None, None
        self._submitted = False
