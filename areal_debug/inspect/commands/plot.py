# SPDX-License-Identifier: Apache-2.0
"""``areal-debug plot``: per-step statistics of one or two runs in one picture
(``inspect/plots/two_runs.py``, one recording alone ``inspect/plots/one_run.py``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "plot per-step statistics (loss, grad norm, reward, importance weight...) of "
    "one recorded run, recorded vs replayed, or run A vs run B, into a PNG"
)
EXAMPLES = """examples:
  areal-debug plot REC -o run.png                                   the recorded run
  areal-debug plot LOGS/t0_replay/replay_report.json -o replay.png   recorded vs replayed
  areal-debug plot REPORT_A REPORT_B -o ab.png                      two replays
  areal-debug plot REC_A REC_B -o runs.png --metric ppo_actor/update/grad_norm

One recording: its anomaly pins and incomplete steps are marked. Two runs: the
first divergent step is marked in every panel and named in the title."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "a", help="recording, replay_report.json, or a replay's log directory"
    )
    p.add_argument(
        "b",
        nargs="?",
        help="the other run (omit for a report vs its recording, or one recording)",
    )
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--metric", action="append", help="metric to plot (repeatable)")
    p.add_argument("--title", help="figure title")
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    with logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.inspect.common import is_recording
        from areal_debug.inspect.plots import one_run as plot_recording
        from areal_debug.inspect.plots import two_runs as plot

        if args.b is None and is_recording(args.a):
            # One recording alone: its recorded run, pins and incomplete steps.
            result = plot_recording.plot_recording(
                args.a, args.output, args.metric, args.title
            )
        else:
            result = plot.plot(args.a, args.b, args.output, args.metric, args.title)
    if isinstance(result, plot_recording.RecordingPlotResult):
        from rich.text import Text

        emit(args, result, Text(plot_recording.summary(result)))
    else:
        emit(args, result, render.plot_result(result))
    return 0
