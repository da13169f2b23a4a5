# SPDX-License-Identifier: Apache-2.0
"""SIGTERM or SIGINT to the torchrun of an SPMD dump or replay, at a random point
of the run (a fixed seed): nothing of the run is left in the process table.
(Single-controller mode: tests/test_single_controller.py.)"""

from __future__ import annotations

import os
import random
import signal
import time

import psutil
import pytest
from support.harness import (
    end_session,
    fake_engine_command,
    start_logged,
    torchrun,
)
from support.recordings import SPMD_D2_STEPS
from support.waiting import wait_until

# How processes end is the subject: Python's own garbage collector, as in
# production (tests/site/sitecustomize.py does not apply).
pytestmark = [pytest.mark.production_gc, pytest.mark.lifecycle]


def run_processes(workdir: str) -> list[psutil.Process]:
    """Live processes started for runs under ``workdir``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if workdir in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def signal_mid_run(workdir: str, name: str, overrides: list[str], sig, seed: int):
    """Start a 2-process run; once it has trained its first step, wait a random
    moment and send ``sig`` to torchrun alone, as a terminal or a scheduler does."""
    cmd, env, stats = fake_engine_command(workdir, name, torchrun(2), overrides)
    proc = start_logged(cmd, workdir, name, env)
    try:
        wait_until(
            lambda: proc.poll() is not None or _trained_a_step(stats),
            300,
            "the run never finished a step",
            interval=0.05,
        )
        time.sleep(random.Random(seed).uniform(0, 1))
        assert proc.poll() is None, "the run ended before the signal"
        # torchrun and its two workers at least: the table check sees them.
        assert len(run_processes(workdir)) >= 3
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
        # Whatever the run started ends with it (moments after torchrun).
        try:
            wait_until(lambda: not run_processes(workdir), 30, "", interval=0.2)
        except AssertionError:
            pass  # what is left is named below
        left = [" ".join(p.cmdline())[:160] for p in run_processes(workdir)]
    finally:
        end_session(proc)
    return rc, left


def _trained_a_step(stats: str) -> bool:
    # The test script appends each step's statistics to this file.
    return os.path.exists(stats) and os.path.getsize(stats) > 0


DUMP = [
    "allocation_mode=fsdp:d2",
    "actor.backend=fsdp:d2",
    "total_train_steps=20",
    "debug.dump_rollout_data=true",
]


@pytest.mark.areal
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_to_torchrun_leaves_no_process_of_a_dump(workdir, sig):
    rc, left = signal_mid_run(str(workdir), f"dump-{sig.name}", DUMP, sig, seed=sig)
    assert rc != 0
    assert left == []


@pytest.mark.areal
@pytest.mark.spmd_recordings
def test_a_signal_to_torchrun_leaves_no_process_of_a_replay(spmd_d2):
    # The suite's 2-process recording, replayed under a trial of its own.
    replay = [
        *DUMP[:2],
        f"total_train_steps={SPMD_D2_STEPS}",
        *spmd_d2.train_overrides,
        "debug.replay_rollout_data=true",
        "debug.replay_trial_name=signalled",
    ]
    d = str(spmd_d2.workdir)
    rc, left = signal_mid_run(d, "replay-signalled", replay, signal.SIGTERM, seed=1)
    assert rc != 0
    assert left == []
