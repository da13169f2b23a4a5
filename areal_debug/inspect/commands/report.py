# SPDX-License-Identifier: Apache-2.0
"""``areal-debug report``: one self-contained HTML page of a recorded run
(``inspect/page/report.py``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import (
    emit,
    json_flag,
    logs_to_stderr,
    recording_and_replay,
)

ABOUT = (
    "write one self-contained HTML page of a recorded run (and a replay of it, or "
    "a second recording) to click through: charts, steps, trajectories, tokens, "
    "stage report"
)
EXAMPLES = """examples:
  areal-debug report REC -o run.html                               the recorded run
  areal-debug report REC LOGS/t0_replay -o replay.html             with a replay of it
  areal-debug report REC_A REC_B -o two.html                       two recordings side by side
  areal-debug report REC -o big.html --steps 40-60 --max-per-step 64
  areal-debug report REC -o run.html --tokenizer /models/qwen

Everything (data, script, style) is inside the one file: it opens from disk or an
attachment, with no network. Per-step charts with anomaly pins and incomplete
steps (and recorded vs replayed with the first divergence); click a step for its
trajectories (sortable, filterable, group mean/std), a trajectory for its tokens
coloured by Δ = trainer − engine log-prob where the trainer's were kept (else by
log-probability). Two recordings: b's statistics over a's, where their batches
part, and each trajectory's pair in b with its tokens aligned and the first that
differs marked. Large recordings: --steps, and at most
--max-per-step trajectories per step (the page says how many are left out)."""

# page.report's DEFAULT_MAX_PER_STEP and DEFAULT_MAX_TOKENS (a test keeps them
# equal): importing it here would load torch for every command's --help.
MAX_PER_STEP, MAX_TOKENS = 32, 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    recording_and_replay(p, second_recording=True)
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.add_argument(
        "--steps",
        help="only these steps, e.g. 0-9,20,50- (50 to the last; default all)",
    )
    p.add_argument(
        "--max-per-step",
        type=int,
        default=MAX_PER_STEP,
        help="trajectories kept per step, first in batch order (0: all; default "
        f"{MAX_PER_STEP})",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=MAX_TOKENS,
        help="completion tokens per trajectory in the token view (0: all; "
        f"default {MAX_TOKENS})",
    )
    p.add_argument(
        "--tokenizer", help="tokenizer to decode with (default: the recorded run's)"
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    with logs_to_stderr():
        from areal_debug.inspect.page import report as html_report

        result = html_report.build_report(
            args.recording,
            args.replay,
            args.output,
            steps=args.steps,
            max_per_step=args.max_per_step,
            max_tokens=args.max_tokens,
            tokenizer=args.tokenizer,
        )
    from rich.text import Text

    emit(args, result, Text(html_report.summary(result)))
    return 0
