# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks read, read here, so that a change fails here, not halfway
through ``make bench``; nothing is timed or judged. The end-to-end benchmarks
(``benchmarks/end_to_end.py``, ``step_n.py``) time a step between two of AReaL's
own "Train step N/M done." log lines, read from the logs of a real dump and its
replay; ``compression.py`` reads a recording's payload sizes from its step
metadata."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from support.recordings import SC_STEPS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from compression import demo_bytes  # noqa: E402
from end_to_end import step_seconds  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "recording-v1"


def test_compression_reads_a_recordings_payload_sizes():
    on_disk, saved, steps, files = demo_bytes(str(FIXTURE))
    # Format 1 stored plain torch.save files: the same bytes either way.
    assert steps == 2 and on_disk == saved > 0 and files > on_disk


@pytest.mark.areal
@pytest.mark.each_areal
@pytest.mark.scheduler
def test_a_step_is_timed_between_areals_commit_lines(sc_d2, tmp_path):
    for name in ("dump", "replay"):
        seconds = step_seconds(sc_d2.workdir / f"{name}.log")
        # Every step after the first, each a positive time.
        assert len(seconds) == SC_STEPS - 1 and min(seconds) > 0, (name, seconds)
    # A log missing a step's line is refused, naming what it found.
    log = (sc_d2.workdir / "dump.log").read_text().splitlines()
    # (AReaL's M is its own count of the run's steps, not total_train_steps.)
    kept = [line for line in log if not re.search(r"Train step 2/\d+ done\.", line)]
    (tmp_path / "gap.log").write_text("\n".join(kept))
    with pytest.raises(SystemExit, match=r"committed steps \[1, 3\]"):
        step_seconds(tmp_path / "gap.log")
