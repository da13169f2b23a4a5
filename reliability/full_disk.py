# SPDX-License-Identifier: Apache-2.0
"""Write failures: dump runs whose files may grow only to a random size
(RLIMIT_FSIZE), so a payload, a metadata file or a checkpoint copy fails part
way. Training must go on, every complete step stay exact, and the recording
say where it stopped and why."""

from __future__ import annotations

import os
import random

from areal_debug.recording.reader import RecordingReader
from reliability.crash import STEPS, check, end, start_child
from reliability.tally import Tally


def run(root: str, n: int, seed: int = 0) -> Tally:
    tally = Tally(
        "full disk: file-size limit mid-write",
        "training goes on; complete steps exact; the stop is recorded",
    )
    rng = random.Random(seed)
    for i in range(n):
        limit = int(2 ** rng.uniform(9, 16))
        path = os.path.join(root, f"limit-{i}", "rec")
        os.makedirs(os.path.dirname(path))
        proc = start_child(path, "--file-size-limit", str(limit))
        out = proc.stdout.read().decode()
        rc = end(proc)
        label = f"files limited to {limit} bytes"
        problem = (
            None if rc == 0 and "trained" in out else f"training stopped (exit {rc})"
        )
        problem = problem or check(path)
        if problem is None:
            reader = RecordingReader(path)
            missing = len(reader.available_steps()) < STEPS
            if missing and not reader.stopped():
                problem = "steps are missing but no stop marker says why"
        tally.record(problem, label)
    return tally
