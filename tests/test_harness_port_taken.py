# SPDX-License-Identifier: Apache-2.0
"""The test harness's answer to an AReaL worker whose port another process took
(tests/support/harness.py): the run is ended and started once more, not left to
the test timeout; a run AReaL recovers itself is left alone."""

from __future__ import annotations

import sys

import pytest
from support import harness

# A stand-in for a scheduler run: prints what werkzeug prints and then hangs, as
# AReaL's scheduler does waiting for the dead worker, unless ``done`` exists
# (created on the first attempt: the second attempt's worker gets its port).
SCRIPT = """
import os, sys, time
done = sys.argv[1]
mode = sys.argv[2]
if mode == "once" and os.path.exists(done):
    print("workers started", flush=True)
    sys.exit(0)
open(done, "w").close()
print(" * Port 12925 is in use by another program. Either identify and", flush=True)
if mode == "recovers":
    print("Worker actor/0 hit port conflict on startup attempt 1/5; "
          "retrying with new ports.", flush=True)
    time.sleep(2)
    sys.exit(0)
time.sleep(600)
"""


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(harness, "PORT_GRACE_S", 0.5)
    monkeypatch.setattr(harness, "WATCH_S", 0.2)


def _run(tmp_path, mode: str) -> tuple[int, str]:
    cmd = [sys.executable, "-c", SCRIPT, str(tmp_path / "done"), mode]
    return harness.run_logged(cmd, str(tmp_path), "run", {}, timeout=60)


def test_a_run_whose_port_was_taken_runs_again(tmp_path, quick):
    rc, log = _run(tmp_path, "once")
    assert rc == 0
    assert "workers started" in log
    first = (tmp_path / "run.port-taken.log").read_text()
    assert harness.PORT_TAKEN in first


def test_a_run_that_loses_its_port_twice_fails_with_its_log(tmp_path, quick):
    rc, log = _run(tmp_path, "always")
    assert rc == -1
    assert harness.PORT_TAKEN in log
    assert (tmp_path / "run.port-taken.log").exists()


def test_a_run_areal_recovers_is_left_alone(tmp_path, quick):
    rc, log = _run(tmp_path, "recovers")
    assert rc == 0
    assert harness.PORT_RETRIED in log
    assert not (tmp_path / "run.port-taken.log").exists()
