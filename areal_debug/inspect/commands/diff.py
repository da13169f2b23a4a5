# SPDX-License-Identifier: Apache-2.0
"""``areal-debug diff``: where two recordings or runs first differ
(``inspect/diff/``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "compare two recordings (first differing element) or two runs' statistics "
    "(first divergent step and metric)"
)
EXAMPLES = """examples:
  areal-debug diff REC_A REC_B                first step/shard/trajectory/key/element that differ
  areal-debug diff LOGS/t0_replay/replay_report.json     a replay against its recording
  areal-debug diff REPORT_A REPORT_B --all    two replays, every metric side by side
  areal-debug diff REPORT REC --metric ppo_actor/update/grad_norm --json

Exit code: 0 when identical, 3 when they differ, 1/2 on bad input."""

# The exit status when the two sides differ (0 when they do not).
DIFFERENT = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "a", help="recording, replay_report.json, or a replay's log directory"
    )
    p.add_argument(
        "b", nargs="?", help="the other one (omit for a report vs its recording)"
    )
    p.add_argument(
        "--all", action="store_true", help="show every metric, not only divergent ones"
    )
    p.add_argument(
        "--metric", action="append", help="show only this metric (repeatable)"
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    with logs_to_stderr():
        from areal_debug.inspect.diff import render as render_diff
        from areal_debug.inspect.diff import two_runs as diff

        result = diff.diff(args.a, args.b)
    if isinstance(result, diff.RecordingDiff):
        emit(args, result, render_diff.recording_diff(result))
        return 0 if result.same else DIFFERENT
    emit(args, result, render_diff.run_diff(result, args.all, args.metric))
    return 0 if result.same else DIFFERENT
