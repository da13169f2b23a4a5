# SPDX-License-Identifier: Apache-2.0
"""``areal-debug extract``: one step as a self-contained reproducer with a test
(``inspect/reproducer/extract.py``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "write one step as a minimal self-contained recording plus a pytest file "
    "that replays it on CPU"
)
EXAMPLES = """examples:
  areal-debug extract REC --step 3 -o repro-step3        the whole step (faithful if it can be)
  areal-debug extract REC --step 3 --traj 0,5 -o repro   two trajectories only
  python -m pytest -q repro-step3                        replays it and checks the statistics

Faithful (every recorded statistic bitwise) when the step is whole: from the latest
kept recover checkpoint before it (recover.mode=on in the dump run) and the steps
after it, or, without one, from step 0 with every recorded step before it (the
size and the steps to train are said). With --alone, or when steps before it are
gone, the step is written as step 0 and trains the model at actor.path, not the
dump run's weights at that step, so only statistics of the batch itself are
compared; with --traj none of the recorded statistics applies and the test checks
that the step runs and stays finite. The generated test says which in its docstring."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.add_argument("--step", type=int, required=True, help="global step to extract")
    p.add_argument("--traj", help="only these trajectories, e.g. 0,3,5-7")
    p.add_argument("-o", "--output", required=True, help="new directory to write")
    p.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="leave the recover checkpoint out: replay from step 0 instead",
    )
    p.add_argument(
        "--alone",
        action="store_true",
        help="the step by itself, as step 0 (smallest, quickest; not faithful)",
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.common import parse_int_list

    with logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.inspect.reproducer import extract

        result = extract.extract(
            args.path,
            args.step,
            args.output,
            trajectories=parse_int_list(args.traj, "--traj"),
            use_checkpoint=not args.no_checkpoint,
            alone=args.alone,
        )
    emit(args, result, render.extract_result(result))
    return 0
