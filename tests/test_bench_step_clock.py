# SPDX-License-Identifier: Apache-2.0
"""The end-to-end benchmarks (``benchmarks/end_to_end.py``, ``step_n.py``) time a
step between two of AReaL's own "Train step N/M done." log lines: read here from
the logs of a real dump and its replay, so a change in AReaL's line fails here,
not halfway through ``make bench``. Nothing is timed or judged."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from support.recordings import SC_STEPS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from end_to_end import step_seconds  # noqa: E402

pytestmark = [pytest.mark.areal, pytest.mark.each_areal]


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
