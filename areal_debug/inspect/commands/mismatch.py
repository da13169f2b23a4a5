# SPDX-License-Identifier: Apache-2.0
"""``areal-debug mismatch``: the training-inference mismatch of each recorded step
(``stages/mismatch.py``), and with ``--top`` the loss tokens furthest from the
engine's log-probs (``inspect/tokens.py``)."""

from __future__ import annotations

import argparse
import sys

from areal_debug.inspect.commands.output import (
    emit,
    json_flag,
    logs_to_stderr,
    recording_and_replay,
)
from areal_debug.recording.reader import RecordingReader, format_ranges

ABOUT = (
    "the training-inference mismatch of each recorded step (and of a replay of "
    "it): how far the trainer's log-probs of the sampled tokens are from the "
    "inference engine's"
)
EXAMPLES = """examples:
  areal-debug mismatch REC                         every recorded step
  areal-debug mismatch REC --steps 40-60 --json    as JSON
  areal-debug mismatch REC LOGS/t0_replay          recorded beside replayed (what-if:
                                                   replay with another actor.dtype)
  areal-debug mismatch REC --top 20                 the 20 loss tokens furthest from
                                                   the engine's log-probs, in context
  areal-debug mismatch REC -o gap.png              and a plot of it over the steps

Per loss token (never prompt or padding), d = trainer - engine log-prob of the same
token, measured where the actor recomputes log-probs (before the step's first
optimizer step; needs actor.recompute_logprob): mean and max |d|, the k1, k2, k3
estimates of KL(engine || trainer), the importance ratio exp(d) before any clamp,
and the share of tokens with |d| above log 2 and log 5; from the trainer's
per-token log-probs a dump keeps (debug.record_trainer_logp, on by default) the
ratio's p50 and p99 and the group/sample with the worst token. Exit code 4 when
no step has it (recompute off, or recorded before areal-debug measured it). --top N
lists the N loss tokens with the largest |d| (step, group, sample, position, both
log-probs, the tokens before it), from those per-token log-probs."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    recording_and_replay(p)
    p.add_argument(
        "--steps",
        help="only these steps, e.g. 0-9,20,50- (50 to the last; default all)",
    )
    p.add_argument(
        "--top",
        type=int,
        metavar="N",
        help="the N loss tokens furthest from the engine's log-probs, in context",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="PNG",
        help="also plot the mismatch statistics over the steps (beside the "
        "replay's when one is given) into this PNG",
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.common import (
        InspectError,
        parse_steps,
        replay_report_at,
        require_path,
    )

    with logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.stages import mismatch

        reader = RecordingReader(require_path(args.recording, "The recording"))
        if args.top is not None:
            worst = _worst_tokens(args, reader)
        else:
            report = replay_report_at(args.replay)[1] if args.replay else None
            rows = mismatch.table(reader, parse_steps(args.steps), report)
            _add_token_figures(reader, rows)
            if args.output:
                plotted = _plot_mismatch(args, reader)
    if args.top is not None:
        emit(args, worst, render.worst_tokens(reader.path, worst))
        return 0 if worst.tokens else 4
    if not rows:
        raise InspectError(
            f"{reader.path} has no complete step"
            + (f" among --steps {args.steps}" if args.steps else "")
            + f" (complete: {format_ranges(reader.available_steps())})."
        )
    emit(args, rows, render.mismatch(reader.path, rows))
    if args.output and not args.json:
        print(f"Plot: {plotted}")
    measured = any(r.recorded or r.replayed for r in rows)
    return 0 if measured else 4


# Steps whose per-token figures the table reads unasked: each reads its batch and
# its kept log-probs (a fraction of a second at 512 x 2k tokens), so a flight
# recording of thousands of steps gets them for the steps --steps names.
PER_TOKEN_STEPS = 64


def _add_token_figures(reader, rows) -> None:
    """Each step's ratio percentiles and worst row, where it kept the trainer's
    per-token log-probs."""
    from dataclasses import asdict

    from areal_debug.inspect.tokens import page_link, token_figures

    if len(rows) > PER_TOKEN_STEPS:
        print(
            f"{len(rows)} steps: the ratio's percentiles and the worst row are read "
            f"per token for at most {PER_TOKEN_STEPS}; name them with --steps.",
            file=sys.stderr,
        )
        return
    for row in rows:
        figures = token_figures(reader, row.step)
        if figures is None:
            row.per_token = None
            continue
        # The worst row's link in the report page, as --top gives each token's.
        link = page_link(row.step, figures.worst_group, figures.worst_row)
        row.per_token = {**asdict(figures), "worst_link": link}


def _plot_mismatch(args, reader) -> str:
    """``mismatch -o``: the mismatch statistics over the steps, beside a replay's
    when one is given; the PNG's path."""
    from areal_debug.inspect.common import InspectError
    from areal_debug.inspect.plots import one_run as plot_recording
    from areal_debug.inspect.plots import two_runs as plot
    from areal_debug.stages.mismatch import stat_name

    wanted = [
        stat_name("abs_diff", "avg"),
        stat_name("abs_diff", "max"),
        stat_name("k3", "avg"),
        stat_name("ratio", "max"),
        stat_name("over_log2", "avg"),
    ]
    steps = reader.available_steps()
    have = set().union(*(reader.recorded_stats(s) or {} for s in steps))
    metrics = [m for m in wanted if m in have]
    if not metrics:
        raise InspectError(
            f"{reader.path} has no mismatch statistics to plot (recorded with "
            "actor.recompute_logprob=false, or before areal-debug measured them)."
        )
    title = f"training-inference mismatch of {reader.manifest.experiment_name}"
    if args.replay:
        return plot.plot(reader.path, args.replay, args.output, metrics, title).path
    return plot_recording.plot_recording(reader.path, args.output, metrics, title).path


def _worst_tokens(args, reader):
    """``mismatch --top N``: the loss tokens furthest from the engine's log-probs."""
    from areal_debug.inspect.common import InspectError, parse_steps
    from areal_debug.inspect.show import tokenizer_path_of
    from areal_debug.inspect.tokens import worst_tokens

    if args.top < 1:
        raise InspectError(f"--top {args.top}: give how many tokens, 1 or more.")
    if args.replay:
        raise InspectError(
            "--top reads the recording's kept trainer log-probs; a replay's are not "
            "kept. Give the recording alone."
        )
    wanted = parse_steps(args.steps)
    steps = [s for s in reader.available_steps() if wanted is None or s in wanted]
    decode = _decoder_of(tokenizer_path_of(reader))
    return worst_tokens(reader, steps, args.top, decode)


def _decoder_of(path: str | None):
    """The run's tokenizer's decode, None where it cannot be loaded (ids shown)."""
    from areal_debug.inspect.common import InspectError
    from areal_debug.inspect.show import load_tokenizer

    try:
        tokenizer = load_tokenizer(path)
    except InspectError:
        return None
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
