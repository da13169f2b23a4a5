# SPDX-License-Identifier: Apache-2.0
"""``areal-debug verify``: every payload's checksum and safe loading, and the
steps a replay cannot use. Exit status 1 on any problem."""

from __future__ import annotations

import argparse

from areal_debug.recording.lock import describe
from areal_debug.recording.reader import RecordingReader

ABOUT = "check every payload's checksum and safe loading"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="recording directory (holds manifest.json)")


def run(args: argparse.Namespace) -> int:
    reader = RecordingReader(args.path)
    writer = reader.writer()
    steps = reader.available_steps()
    checked, problems = _verify_steps(reader, steps)
    bad_files = len(problems)
    if writer is not None:
        # Steps after the last complete one are being written, not broken.
        print(
            f"NOTE a dump run is still recording ({describe(writer)}): "
            f"verified the {len(steps)} steps complete when verify started"
        )
    for step in reader.incomplete_steps():
        if writer is not None and step > max(steps, default=-1):
            print(f"NOTE step {step} is being written")
            continue
        problems.append(
            f"step {step} is incomplete (no step.json): a head did not finish "
            "writing it; replay cannot use it."
        )
    for stop in reader.stopped():
        # Not a defect of the recording: what was recorded before is whole.
        print(
            f"NOTE shard {stop.get('shard')} stopped recording at step "
            f"{stop.get('step')}: {stop.get('error')}; {reader.stop_consequence(stop)}"
        )
    for p in problems:
        print(f"FAIL {p}")
    print(
        f"{checked - bad_files}/{checked} files of {len(steps)} steps verified; "
        f"{len(problems)} problem(s)."
    )
    return 1 if problems else 0


def _verify_steps(reader: RecordingReader, steps: list[int]) -> tuple[int, list[str]]:
    """(files checked, problems found) over ``steps``, with a progress bar for a
    person at a terminal."""
    from areal_debug.inspect.common import track

    checked, problems = 0, []
    for step in track(steps, "verifying", total=len(steps)):
        files, found = reader.verify_step(step)
        checked += files
        problems += found
    return checked, problems
