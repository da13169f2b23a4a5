# SPDX-License-Identifier: Apache-2.0
"""A Ctrl-C or SIGTERM that lands in code Python runs for the garbage collector
still stops the controller (once seen in CI: the run trained on after Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

# Signals landing in cleanup code are the subject: Python's own garbage
# collector, as in production (tests/site/sitecustomize.py does not apply).
pytestmark = pytest.mark.production_gc

# The signal arrives while a weakref callback runs, as when the garbage
# collector happens to run one at that moment: Python prints "Exception
# ignored in" and goes on.
SCRIPT = textwrap.dedent(
    """
    import signal, sys, time, weakref

    # Ctrl-C raises KeyboardInterrupt, as in any Python started at a terminal
    # (a background job of a shell inherits SIGINT ignored, and then Python
    # installs no handler of its own).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    if {redeliver}:
        from areal_debug.single_controller.worker_reaper import WorkerReaper

        WorkerReaper()
    else:  # Python's own Ctrl-C handler, and a SIGTERM handler like ours
        signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))

    class Garbage:
        pass

    def land_in_callback(_):
        signal.raise_signal(signal.{sig})
        for _ in range(1000):  # the handler runs here, inside the callback
            pass

    garbage = Garbage()
    ref = weakref.ref(garbage, land_in_callback)
    del garbage
    for _ in range(100):  # the training loop, 5 s of it
        time.sleep(0.05)
    print("trained on", flush=True)
    """
)

# An uncaught KeyboardInterrupt ends `python -c` by SIGINT itself (Python 3.8+),
# or with 1 once AReaL is loaded, as in a controller (`import areal` changes how
# it exits; WorkerReaper's module loads no AReaL).
STOPPED = {"SIGINT": {-signal.SIGINT, 1}, "SIGTERM": {128 + signal.SIGTERM}}


def run(sig: str, redeliver: bool) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(sig=sig, redeliver=redeliver)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_swallowed_signal_is_raised_again_and_stops_the_controller(sig):
    run_ = run(sig, redeliver=True)
    assert "Exception ignored in" in run_.stderr
    assert f"{sig} reached Python cleanup code" in run_.stderr + run_.stdout
    assert "trained on" not in run_.stdout
    assert run_.returncode in STOPPED[sig], run_.stderr[-2000:]


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_without_redelivery_the_same_signal_is_lost(sig):
    # The situation above is real: Python alone trains on.
    run_ = run(sig, redeliver=False)
    assert "Exception ignored in" in run_.stderr
    assert "trained on" in run_.stdout
    assert run_.returncode == 0, run_.stderr[-2000:]
