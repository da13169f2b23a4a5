# SPDX-License-Identifier: Apache-2.0
"""Single-controller mode: the RPC workers a controller started end with it."""

from __future__ import annotations

import atexit
import signal
import sys
import threading
from typing import Any

from areal_debug.areal_compat import (
    is_ray_scheduler,
    ray_connected,
    scheduler_has_workers,
)
from areal_debug.logs import get_logger

logger = get_logger("DebugWorkerReaper")


class WorkerReaper:
    """Deletes whatever the scheduler still holds, once, on every exit path.

    AReaL deletes its workers in ``PPOTrainer.close()``; a failure in
    ``__init__`` (no ``close()``), an exception inside ``close()``, or a
    SIGTERM to the controller (no Python cleanup at all) would leave them
    running. SIGTERM is turned into ``SystemExit`` so the normal cleanup runs
    first, and a Ctrl-C or SIGTERM that Python swallowed is delivered again
    (see ``_redeliver_swallowed_signals``).
    """

    def __init__(self):
        self._scheduler = None
        self._done = False
        atexit.register(self.reap)
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGTERM)
            if previous in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _exit_on_sigterm)
            _redeliver_swallowed_signals()

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


class _SignalExit(SystemExit):
    """The ``SystemExit`` of ``_exit_on_sigterm``, told apart from a plain one."""


def _exit_on_sigterm(signum, frame) -> None:
    raise _SignalExit(128 + signum)


def _redeliver_swallowed_signals() -> None:
    """Raise a signal again when Python ignored the exception it turned into.

    A signal's Python handler runs in whatever code the main thread executes
    next; when that is a weakref callback or a ``__del__`` (the garbage
    collector runs them at any point), Python prints "Exception ignored in"
    and carries on, so the controller and its workers train on after a
    Ctrl-C or a job system's SIGTERM. Raised again a moment later, it lands in
    the training loop (or is swallowed and raised again). Only our SIGTERM
    handler's exit and Python's own Ctrl-C handler are redelivered: a user's
    handler may not expect to run twice.
    """
    previous = sys.unraisablehook
    if getattr(previous, "redelivers_signals", False):
        return

    def hook(unraisable) -> None:
        previous(unraisable)
        signum = _swallowed_signal(unraisable.exc_value)
        if signum is None or sys.is_finalizing():
            return
        logger.warning(
            f"{signal.Signals(signum).name} reached Python cleanup code, which "
            "ignores exceptions; raising it again so the run stops as asked."
        )
        # From another thread, a moment later: raised here, the handler would
        # run inside this hook, whose exceptions Python ignores as well.
        timer = threading.Timer(0.05, signal.raise_signal, args=(signum,))
        timer.daemon = True
        timer.start()

    hook.redelivers_signals = True
    sys.unraisablehook = hook


def _swallowed_signal(exc: BaseException | None) -> int | None:
    if isinstance(exc, _SignalExit):
        return exc.code - 128
    if (
        isinstance(exc, KeyboardInterrupt)
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        return signal.SIGINT
    return None
