# SPDX-License-Identifier: Apache-2.0
"""``areal-debug mismatch``: the training-inference mismatch of each recorded step
(``stages/mismatch.py``), and with ``--top`` the loss tokens furthest from the
engine's log-probs (``inspect/tokens.py``)."""

from __future__ import annotations

import argparse

# The names cli.py gave them, where these functions were: their bodies moved
# unchanged.
from areal_debug.inspect.commands.output import emit as _emit
from areal_debug.inspect.commands.output import json_flag as _json_flag
from areal_debug.inspect.commands.output import logs_to_stderr as _logs_to_stderr
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
  areal-debug plot REC --metric areal_debug/mismatch/abs_diff/max -o gap.png

Per loss token (never prompt or padding), d = trainer - engine log-prob of the same
token, measured where the actor recomputes log-probs (before the step's first
optimizer step; needs actor.recompute_logprob): mean and max |d|, the k1, k2, k3
estimates of KL(engine || trainer), the importance ratio exp(d) before any clamp,
and the share of tokens with |d| above log 2 and log 5. Exit code 4 when no step
has it (recompute off, or recorded before areal-debug measured it). --top N lists
the N loss tokens with the largest |d| (step, trajectory, position, both log-probs,
the tokens before it), from the trainer's per-token log-probs a dump keeps with
debug.record_stage_tensors=true."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recording", help="recording directory (holds manifest.json)")
    p.add_argument(
        "replay",
        nargs="?",
        help="replay_report.json of a replay of it, or the replay's log directory",
    )
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
    _json_flag(p)


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.common import (
        InspectError,
        parse_steps,
        replay_report_at,
        require_path,
    )

    with _logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.stages import mismatch

        reader = RecordingReader(require_path(args.recording, "The recording"))
        if args.top is not None:
            worst = _worst_tokens(args, reader)
        else:
            report = replay_report_at(args.replay)[1] if args.replay else None
            rows = mismatch.table(reader, parse_steps(args.steps), report)
    if args.top is not None:
        _emit(args, worst, render.worst_tokens(reader.path, worst))
        return 0 if worst.tokens else 4
    if not rows:
        raise InspectError(
            f"{reader.path} has no complete step"
            + (f" among --steps {args.steps}" if args.steps else "")
            + f" (complete: {format_ranges(reader.available_steps())})."
        )
    _emit(args, rows, render.mismatch(reader.path, rows))
    measured = any(r.recorded or r.replayed for r in rows)
    return 0 if measured else 4


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
