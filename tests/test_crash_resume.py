# SPDX-License-Identifier: Apache-2.0
"""A real AReaL dump run SIGKILLed mid-run (the whole torchrun session), resumed
by AReaL's own recovery, and replayed: the recording-level crash family
(reliability/crash.py) on the real trainer."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest
from support.harness import (
    end_session,
    fake_engine_command,
    recording_dir,
    replay_report,
    run_torchrun,
    start_logged,
    torchrun,
)
from support.waiting import wait_until
from test_cli_inspect import rewrite_payload

from areal_debug.cli import main as cli
from areal_debug.recording.format import STEP_META, step_dirname
from areal_debug.recording.reader import RecordingReader
from areal_debug.testing import kill_run

# A killed run and its resumption are the subject: Python's own garbage
# collector, as in production (tests/site/sitecustomize.py does not apply).
pytestmark = [pytest.mark.production_gc, pytest.mark.lifecycle]

STEPS = 5
DUMP = [
    f"total_train_steps={STEPS}",
    "debug.dump_rollout_data=true",
    "recover.mode=on",
    # One recover checkpoint, after step 2 (AReaL counts the steps: the third
    # saves). Step 3's batch is recorded after it, so a run killed once step 3 is
    # recorded resumes at step 3 and records it again (the first attempt's is
    # superseded): the same outcome however far the killed run got.
    "++recover.freq_steps=3",
]


def kill_after_step(workdir: str, step: int) -> str:
    """Start the dump; SIGKILL its whole session once ``step`` is recorded."""
    cmd, env, _ = fake_engine_command(workdir, "killed", torchrun(1), DUMP)
    done = os.path.join(recording_dir(workdir), step_dirname(step), STEP_META)
    proc = start_logged(cmd, workdir, "killed", env)
    try:
        wait_until(
            lambda: os.path.exists(done),
            300,
            "the dump never recorded the step",
            interval=0.05,
            give_up=lambda: None
            if proc.poll() is None
            else "the dump ended before it could be killed",
        )
        # The whole run, as a crashed node: torchrun's trainer is in a session
        # of its own, which killing torchrun's group would leave training.
        kill_run(proc)
    finally:
        end_session(proc)
    with open(os.path.join(workdir, "killed.log")) as f:
        return f.read()


@pytest.mark.areal
def test_a_killed_dump_run_resumes_and_its_recording_replays_bitwise(workdir):
    d = str(workdir)
    path = recording_dir(d)
    kill_after_step(d, 3)

    # What the killed run left: complete steps whole, the lock free, verify
    # naming what is incomplete in one line each.
    reader = RecordingReader(path)
    complete = reader.available_steps()
    assert complete[:4] == [0, 1, 2, 3]
    for step in complete:
        assert reader.verify_step(step)[1] == []
    # The kernel frees the lock as each killed process ends (within moments).
    wait_until(
        lambda: reader.writer() is None, 30, lambda: f"still locked: {reader.writer()}"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli(["verify", path])
    assert rc == (1 if reader.incomplete_steps() else 0), out.getvalue()
    for step in reader.incomplete_steps():
        assert f"step {step} is incomplete" in out.getvalue()

    # AReaL resumes from its recover checkpoint; the recording continues. Its
    # launchers clear the trial's name-resolve entries first (a killed run
    # leaves them); under bare torchrun the test does.
    shutil.rmtree(os.path.join(d, "root", "name_resolve"))
    resumed = run_torchrun(d, "resumed", 1, DUMP)
    assert resumed.returncode == 0, resumed.log[-3000:]
    assert "Continuing the recording" in resumed.log
    reader = RecordingReader(path)
    assert reader.available_steps() == list(range(STEPS))
    assert reader.incomplete_steps() == []

    # Every step replays bit for bit, across the kill and the resume.
    replay = run_torchrun(
        d,
        "replay",
        1,
        [
            f"total_train_steps={STEPS}",
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=t0_replay",
        ],
    )
    assert replay.returncode == 0, replay.log[-3000:]
    report = replay_report(d)
    assert report["summary"]["steps"] == STEPS
    assert report["summary"]["all_identical"] is True, report["first_divergence"]

    # Was the resume lossless? It was: resumed at step 3 on the killed run's
    # weights after step 2, step 3 redone on the same prompts, nothing repeated.
    rc, check = cli_json("resume", path)
    assert rc == 0 and check["lossless"] is True, check
    (resume,) = check["resumes"]
    assert (resume["step"], resume["weights"]) == (3, "identical"), resume
    assert resume["superseded"] and 3 in resume["compared_steps"], resume
    assert resume["different_prompts"] == [] and check["lost"] == []
    assert check["repeated"] == []
    # A copy whose redone step 3 consumed step 2's first prompt instead of its
    # own: the prompt it skipped is lost, the one it took twice repeated.
    copy = os.path.join(d, "planted")
    shutil.copytree(path, copy)
    first = RecordingReader(copy).load_shard(2, 0)[0]

    def take_step_2s_prompt(batch):
        batch[0] = first

    rewrite_payload(copy, 3, 0, take_step_2s_prompt)
    rc, check = cli_json("resume", copy)
    assert rc == 3 and check["lossless"] is False
    assert check["resumes"][0]["different_prompts"] == [3]
    assert [lost["step"] for lost in check["lost"]] == [3]
    assert RecordingReader(copy).steps_per_epoch >= 4  # steps 2 and 3: one epoch
    assert [(r["step"], r["earlier"]) for r in check["repeated"]] == [(3, 2)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["resume", copy]) == 3
    assert "Redone steps on OTHER prompts" in out.getvalue()
    assert "NOT lossless" in out.getvalue()
    # ls says the recording was resumed, and what checks it; the resumed run's log
    # said so too.
    rc, listed = cli_json("ls", path)
    assert rc == 0 and listed[0]["resumes"] == 1
    assert f"`areal-debug resume {path}` checks" in resumed.log


def cli_json(*argv) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli([*argv, "--json"])
    return rc, json.loads(out.getvalue())
