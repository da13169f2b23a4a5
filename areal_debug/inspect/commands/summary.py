# SPDX-License-Identifier: Apache-2.0
"""``areal-debug inspect``: what a recording holds, step by step; and
``areal-debug verify``: whether it is sound (every payload's checksum and safe
loading, and the steps a replay cannot use; exit status 1 on any problem).

``inspect`` reads the manifest and each step's ``step.json`` only (never a
payload), so it loads neither torch nor AReaL.
"""

from __future__ import annotations

import argparse
import os
import shlex

from areal_debug.inspect.common import human_bytes
from areal_debug.recording.format import STATS, step_dirname
from areal_debug.recording.lock import describe
from areal_debug.recording.reader import RecordingReader, format_ranges

ABOUT = "show what a recording holds"
VERIFY_ABOUT = "check every payload's checksum and safe loading"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="recording directory (holds manifest.json)")


def run(args: argparse.Namespace) -> int:
    reader = RecordingReader(args.path)
    # Read once: a dump run still recording adds steps meanwhile.
    steps = reader.available_steps()
    _print_header(reader, steps)
    print()
    print(
        f"{'step':>6} {'epoch':>5} {'trajs':>6} {'tokens':>9} {'versions':>9} {'payload':>10}  stats"
    )
    for step in steps:
        print(_step_row(reader, step))
    return 0


def _print_header(reader: RecordingReader, steps: list[int]) -> None:
    """The run, its versions and layout, which steps are complete, who writes."""
    m = reader.manifest
    layout = m.layout
    print(f"recording   {reader.path}")
    print(
        f"format      v{m.format_version} (areal-debug {m.areal_debug_version or '?'}, "
        f"areal {m.areal_version or '?'}, torch {m.torch_version or '?'})"
    )
    print(f"run         {m.experiment_name}/{m.trial_name}, created {m.created}")
    print(
        f"layout      {layout.mode}, world size {layout.world_size or '?'}, "
        f"training data-parallel size {layout.training_dp_size}, "
        f"{reader.num_shards} shard(s) per step, {reader.steps_per_epoch} steps/epoch"
    )
    writer = reader.writer()
    if writer is not None:
        print(
            f"writing     a dump run is still recording ({describe(writer)}): "
            "only complete steps are listed"
        )
    incomplete = reader.incomplete_steps()
    print(
        f"steps       {format_ranges(steps)} complete"
        + (f"; incomplete: {format_ranges(incomplete)}" if incomplete else "")
    )
    for seam in m.missing_seams:
        print(
            f"missing     {seam.get('capability', '?')} not recorded: "
            f"{seam.get('problem', '?')} in the dump run's AReaL"
        )
    from areal_debug.compare.coverage import coverage

    for line in coverage(reader, steps).lines():
        print(f"coverage    {line}")
    from areal_debug.inspect.resume import describe_position, resume_positions

    for resume in resume_positions(reader):
        print(
            f"resume      {describe_position(resume)} "
            f"(areal-debug resume {shlex.quote(reader.path)}: the prompts)"
        )
    for stop in reader.stopped():
        print(
            f"stopped     shard {stop.get('shard')} stopped recording at step "
            f"{stop.get('step')}: {stop.get('error')} ({stop.get('time')}); "
            f"{reader.stop_consequence(stop)}"
        )


def _step_row(reader: RecordingReader, step: int) -> str:
    """One line of the step table, from the step's ``step.json``."""
    meta = reader.step_meta(step)
    # In the unit that shows it (a tiny step is KiB: 0.00 MiB said nothing).
    size = human_bytes(sum(s.entry.bytes for s in meta.shards))
    v = meta.policy_version
    versions = f"{v[0]}-{v[1]}" if v else "-"
    has_stats = os.path.exists(os.path.join(reader.path, step_dirname(step), STATS))
    return (
        f"{step:>6} {meta.epoch:>5} {meta.num_trajectories:>6} {meta.num_tokens:>9} "
        f"{versions:>9} {size:>10}  {'yes' if has_stats else 'no'}"
    )


# -- verify ------------------------------------------------------------------------
def verify(args: argparse.Namespace) -> int:
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
