# SPDX-License-Identifier: Apache-2.0
"""Permission lost mid-run: the recording directory is made read-only while a
dump run writes it. The dump runs without the capability to override file
permissions (root otherwise ignores them: CAP_DAC_OVERRIDE), and another
process takes write permission away after a random number of complete steps,
as an admin or a remount would. Training must go on,
every complete step stay exact, and the recording say where it stopped and why
(the stop marker stays in the file each head reserved at start, since the
directory takes no new names).
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import tempfile
import time

from areal_debug.recording.format import STEP_META, step_dirname
from areal_debug.recording.reader import RecordingReader
from reliability import dump_child
from reliability.crash import STEPS, check, end
from reliability.tally import Tally

# linux/capability.h and linux/prctl.h
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
PR_CAPBSET_DROP = 24


def _drop_permission_override() -> None:
    """In the child before exec: without these in its bounding set, the process
    is held to file permissions like any user (root as the files' owner)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def start_held_to_permissions(path: str) -> subprocess.Popen:
    """The dump child, slow enough to be caught mid-run."""
    return subprocess.Popen(
        dump_child.command(path, "--steps", str(STEPS), "--pace", "0.1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=_drop_permission_override,
        start_new_session=True,
    )


def wait_for_step(path: str, step: int, proc: subprocess.Popen) -> bool:
    done = os.path.join(path, step_dirname(step), STEP_META)
    deadline = time.monotonic() + 60
    while not os.path.exists(done):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def run_case(root: str, after: int) -> str | None:
    """One dump run whose directory turns read-only after step ``after``."""
    path = os.path.join(root, "rec")
    proc = start_held_to_permissions(path)
    if not wait_for_step(path, after, proc):
        end(proc)
        return f"the dump never completed step {after}"
    os.chmod(path, 0o555)
    out = proc.stdout.read().decode()
    rc = end(proc)
    os.chmod(path, 0o755)
    if rc != 0 or "trained" not in out:
        return f"training stopped (exit {rc})"
    problem = check(path)
    if problem is not None:
        return problem
    reader = RecordingReader(path)
    complete = reader.available_steps()
    if complete[: after + 1] != list(range(after + 1)):
        return f"steps before the change are missing: {complete}"
    if len(complete) == STEPS:
        return None  # every remaining write went into existing directories
    stops = reader.stopped()
    if not stops:
        return "steps are missing but no stop marker says why"
    if not all("Permission denied" in str(m.get("error")) for m in stops):
        return f"the stop markers do not say why: {stops}"
    first = min(m["step"] for m in stops)
    if first <= after or any(s >= first for s in complete):
        return f"the markers say step {first}, complete steps are {complete}"
    return None


def run(root: str, n: int, seed: int = 0) -> Tally:
    tally = Tally(
        "permission lost: directory read-only mid-run",
        "training goes on; complete steps exact; the stop is recorded",
    )
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        after = rng.randint(0, STEPS - 4)
        case = tempfile.mkdtemp(prefix=f"read-only-{i}-", dir=root)
        try:
            tally.record(run_case(case, after), f"read-only after step {after}")
        finally:
            shutil.rmtree(case, ignore_errors=True)
    return tally
