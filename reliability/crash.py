# SPDX-License-Identifier: Apache-2.0
"""Crash consistency: dump runs SIGKILLed at named points and at random times,
each resumed, until one finishes.

After every kill: each step listed complete verifies and holds exactly what
was recorded; ``areal-debug verify`` names the incomplete steps in one line
each, without a traceback; the lock is free for the resumed run. After the
run that finishes: every step is complete and exact, and nothing a killed run
left half-done remains.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import subprocess
import time

from areal_debug.cli import main as cli
from areal_debug.recording.format import RecordingError
from areal_debug.recording.lock import writer_of
from areal_debug.recording.reader import RecordingReader
from reliability import dump_child, recording
from reliability.dump_child import POINTS
from reliability.tally import Tally

STEPS = 12


def start_child(path: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        dump_child.command(path, "--steps", str(STEPS), *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


def started_writing(proc: subprocess.Popen) -> bool:
    """Wait for the child's ``writing`` line (its imports done, recording begun).
    AReaL logs to stdout too, so other lines may come first; False at EOF."""
    for line in proc.stdout:
        if line.strip() == b"writing":
            return True
    return False


def end(proc: subprocess.Popen) -> int:
    """Wait for ``proc`` (at most a minute), killing it if it hangs."""
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return -999
    finally:
        proc.stdout.close()


def run_once(
    path: str, rng: random.Random, kill: bool, keep_last: int | None
) -> tuple[str, int]:
    """One dump run; killed at a point or a random time if ``kill``."""
    extra = [] if keep_last is None else ["--keep-last", str(keep_last)]
    if not kill:
        return "no kill", end(start_child(path, *extra))
    points = [p for p in POINTS if keep_last or not p.startswith("retention")]
    point = rng.choice([*points, "random time", "random time"])
    if point != "random time":
        n = 1 if point == "lock-taken" else rng.randint(1, 3)
        return f"{point}:{n}", end(start_child(path, *extra, "--kill", f"{point}:{n}"))
    proc = start_child(path, *extra)
    try:
        started_writing(proc)
        delay = rng.uniform(0, 0.4)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        rc = end(proc)
    return f"random time +{delay * 1000:.0f} ms", rc


def check(path: str) -> str | None:
    """What is wrong with a (possibly killed) recording, None if nothing."""
    if not os.path.exists(os.path.join(path, "manifest.json")):
        return None  # killed before the recording began: nothing to check
    try:
        reader = RecordingReader(path)
        for step in reader.available_steps():
            _, problems = reader.verify_step(step)
            if problems:
                return f"complete step {step} does not verify: {problems[0]}"
            problem = recording.altered(reader, step)
            if problem:
                return f"complete {problem}"
    except RecordingError as e:
        return f"RecordingError: {e}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(["verify", path])
    for step in reader.incomplete_steps():
        if f"step {step} is incomplete" not in out.getvalue():
            return (
                f"verify does not name incomplete step {step}: {out.getvalue()[-300:]}"
            )
    if rc not in (0, 1) or "Traceback" in err.getvalue():
        return f"verify exited {rc}: {err.getvalue()[-300:]}"
    if writer_of(path) is not None:
        return "the killed run's lock is still held"
    return None


def leftovers(path: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(path):
        if "superseded" in root.split(os.sep):
            continue  # moved aside whole, on purpose
        found += [
            os.path.join(root, n)
            for n in dirs + files
            if n.startswith((".tmp-", ".deleting-")) or n.endswith(".partial")
        ]
    return found


def final_check(path: str, keep_last: int | None) -> str | None:
    reader = RecordingReader(path)
    steps = reader.available_steps()
    want = (
        list(range(STEPS))
        if keep_last is None
        else list(range(STEPS - keep_last, STEPS))
    )
    if not set(want) <= set(steps):
        return f"after the finishing run, steps {steps} are complete; expected {want}"
    if reader.incomplete_steps():
        return (
            f"after the finishing run, steps {reader.incomplete_steps()} are incomplete"
        )
    left = leftovers(path)
    return f"half-done files remain: {left[:3]}" if left else None


def run(root: str, chains: int, kills_per_chain: int = 4, seed: int = 0) -> list[Tally]:
    """``chains`` recordings, each killed ``kills_per_chain`` times, then finished."""
    kills = Tally(
        "crash: SIGKILL at a point",
        "complete steps verify and are exact; verify names the rest; lock freed",
    )
    resumed = Tally(
        "crash: resumed dump run",
        "finishes the recording: every step complete, nothing half-done left",
    )
    for chain in range(chains):
        rng = random.Random(seed * 1000 + chain)
        path = os.path.join(root, f"chain-{chain}", "rec")
        os.makedirs(os.path.dirname(path))
        keep_last = rng.choice([None, 3])
        history = []
        for attempt in range(kills_per_chain + 1):
            label, rc = run_once(path, rng, attempt < kills_per_chain, keep_last)
            history.append(f"{label} (exit {rc})")
            problem = check(path)
            where = f"chain {chain}: {' -> '.join(history)}"
            if attempt < kills_per_chain:
                # A run the kill point never reached finished: not a kill.
                if problem or rc == -signal.SIGKILL:
                    kills.record(problem, where)
            else:
                problem = (
                    problem
                    or (f"exit {rc}" if rc else None)
                    or final_check(path, keep_last)
                )
                resumed.record(problem, where)
    return [kills, resumed]
