# SPDX-License-Identifier: Apache-2.0
"""``debug.lossless_resume``: a resume trains the prompts AReaL drew and had not
trained when it saved its recover checkpoint.

AReaL's rollout dispatcher draws the next batch from the dataloader whenever a
step's rollouts take over 1 s, before the step's recover checkpoint stores the
dataloader's position: a resume starts after that position and never trains what
was drawn ahead (docs/areal-known-issues.md). Here the train dataloader keeps, in
its own state (so in the same file AReaL writes the position to, with the rest of
the recover checkpoint), every item it yielded that no step has trained yet:

- yielded and not yet given to the dispatcher (the rest of a batch whose first
  items were);
- given to the dispatcher and not yet handed to a step: queued, running, or done
  and waiting. A rollout that was running is generated again from its prompt.

Restored, the dataloader yields those first, in the order they were drawn, then
its own position on. A rejected rollout (the workflow's ``None``) leaves the
dispatcher like a trained one: an uninterrupted run would not train it either.

The items are the dataset's own rows (AReaL pickles the dataloader state).
"""

from __future__ import annotations

import itertools
from typing import Any

from areal_debug import areal_compat
from areal_debug.config import DebugConfig, DebugConfigError
from areal_debug.logs import get_logger

logger = get_logger("DebugLosslessResume")


class DrawLedger:
    """Every item the train dataloader yielded, until the dispatcher hands its
    rollout to a step (or rejects it).

    Items are told apart by identity: the dispatcher's inputs carry the very
    objects the dataloader yielded (``areal_compat.watch_submissions``). A dataset
    that returns the same object for a row in every epoch is held once: an epoch
    passes between two yields of it, far more than any off-policyness. All calls
    come from the trainer's thread (``prepare_batch`` draws and submits there,
    the recover checkpoint reads there)."""

    def __init__(self):
        self._order = itertools.count()
        # id(item) -> (draw order, item): the item is held, so its id stays its own.
        self._drawn: dict[int, tuple[int, Any]] = {}
        # task id -> id(item), for the items given to the dispatcher.
        self._tasks: dict[int, int] = {}
        self._dispatcher = None

    def watch(self, dispatcher: Any, patches: Any) -> None:
        self._dispatcher = dispatcher
        areal_compat.watch_submissions(dispatcher, patches, self.submitted)

    def yielded(self, batch) -> None:
        for item in batch:
            self._drawn[id(item)] = (next(self._order), item)

    def submitted(self, task_id: int, data: Any) -> None:
        if id(data) in self._drawn:
            self._tasks[task_id] = id(data)

    def untrained(self) -> list:
        """The items no step has trained yet, in the order they were drawn; those
        the dispatcher is done with are forgotten."""
        active = (
            areal_compat.active_task_ids(self._dispatcher)
            if self._dispatcher is not None
            else set()
        )
        for task_id in [t for t in self._tasks if t not in active]:
            self._drawn.pop(self._tasks.pop(task_id), None)
        return [item for _, item in sorted(self._drawn.values(), key=lambda e: e[0])]


class LosslessResume:
    """The trainer's part: the train dataloader made to keep and serve what was
    drawn ahead, and the rollout engine's dispatcher watched."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.ledger = DrawLedger()
        self.patches = areal_compat.MethodPatches()
        self.loader = None
        self.config = None

    def prepare(self, config) -> None:
        """Before ``PPOTrainer.__init__``: refuse what AReaL cannot resume."""
        self.config = config
        keys = areal_compat.controller_v2_keys(config)
        if keys:
            raise DebugConfigError(
                f"debug.lossless_resume=true with {' and '.join(f'{k}=v2' for k in keys)}: "
                "AReaL's recovery does not support its v2 controllers, so there is no "
                "resume to make lossless. Use the v1 controllers (AReaL's default) "
                "or leave debug.lossless_resume off."
            )

    def build_dataloader(self, loader, dataset_config):
        """The train dataloader keeps what it drew and no step trained."""
        if dataset_config is not self.config.train_dataset:
            return loader
        self.loader = areal_compat.serve_untrained_first(loader, self.ledger)
        return loader

    def started(self) -> None:
        """After ``PPOTrainer.__init__`` (its recovery included)."""
        dispatcher = areal_compat.rollout_dispatcher(self.trainer.rollout)
        if self.loader is None or dispatcher is None:
            raise DebugConfigError(
                "debug.lossless_resume=true: "
                + (
                    "the train dataloader was not built through "
                    "PPOTrainer._create_dataloader"
                    if self.loader is None
                    else f"the rollout engine ({type(self.trainer.rollout).__name__}) "
                    "has no rollout dispatcher this AReaL build was known to have"
                )
                + ", so what AReaL draws ahead cannot be kept. Leave "
                "debug.lossless_resume off, or run an AReaL build areal-debug "
                "supports (areal-debug doctor)."
            )
        self.ledger.watch(dispatcher, self.patches)
        served = areal_compat.untrained_served_first(self.loader)
        if served:
            logger.info(
                f"Lossless resume: {served} input(s) AReaL had drawn and not trained "
                "before the recover checkpoint are served first (those whose "
                "rollouts were running are generated again from their prompts)."
            )

    def close(self) -> None:
        self.patches.remove_all()


def lossless_resume(trainer, debug: DebugConfig) -> LosslessResume | None:
    """The trainer's lossless resume, where ``debug.lossless_resume`` asks for it
    and the run draws rollouts (a replay draws none: it ignores the key)."""
    if not debug.lossless_resume or debug.replay_rollout_data:
        return None
    return LosslessResume(trainer)
