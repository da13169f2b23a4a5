# SPDX-License-Identifier: Apache-2.0
"""Single-controller mode: the RPC workers a controller started end with it."""

from __future__ import annotations

import atexit
import signal
import threading
from typing import Any

from areal.utils import logging

from areal_debug.areal_compat import (
    is_ray_scheduler,
    ray_connected,
    scheduler_has_workers,
)

logger = logging.getLogger("DebugWorkerReaper")


class WorkerReaper:
    """Deletes whatever the scheduler still holds, once, on every exit path.

    AReaL deletes its workers in ``PPOTrainer.close()``; a failure in
    ``__init__`` (no ``close()``), an exception inside ``close()``, or a
    SIGTERM to the controller (no Python cleanup at all) would leave them
    running. SIGTERM is turned into ``SystemExit`` so the normal cleanup runs
    first.
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
        if is_ray_scheduler(self._scheduler) and not ray_connected():
            # Ray shut down first (its atexit hook runs before ours): it has
            # already ended the actors of this driver.
            return
        try:
            if scheduler_has_workers(self._scheduler):
                logger.info("Ending the RPC workers this controller started.")
            self._scheduler.delete_workers()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            logger.warning(f"Could not delete the RPC workers: {e!r}")


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)
