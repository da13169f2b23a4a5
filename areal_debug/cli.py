# SPDX-License-Identifier: Apache-2.0
"""``areal-debug``: look into and check recordings and replays.

This module is the table of the subcommands (:data:`COMMANDS`): each one's name,
synopsis and one-line help, the function adding its arguments and the one running
it, from its module in ``areal_debug.inspect.commands`` (``tooling.demo_command``
for the demo). The ``--help`` list of commands is made from the table, so it
names every command the parser has. The command modules import nothing heavy at
their top: ``--help``, ``ls`` and ``inspect`` load neither torch nor AReaL.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from areal_debug.inspect.commands import (
    diff,
    doctor,
    extract,
    ls,
    plot,
    report,
    show,
    summary,
    verify,
)
from areal_debug.inspect.commands.output import emit as _emit
from areal_debug.inspect.commands.output import json_flag as _json_flag
from areal_debug.inspect.commands.output import logs_to_stderr as _logs_to_stderr
from areal_debug.recording.format import RecordingError
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.tooling import demo_command


@dataclass(frozen=True)
class Command:
    """One subcommand: a row of the ``--help`` list, and how to run it."""

    name: str
    usage: str  # its arguments in the command list: "PATH --step N"
    help: str  # one line, in the command list that ends areal-debug --help
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # returns the exit status
    about: str = ""  # what it does, longer: the parser's list, atop its --help
    examples: str = ""  # the end of its own --help


# -- mismatch (its module is to come) -------------------------------------------------
def cmd_mismatch(args) -> int:
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


MISMATCH_ABOUT = (
    "the training-inference mismatch of each recorded step (and of a replay of "
    "it): how far the trainer's log-probs of the sampled tokens are from the "
    "inference engine's"
)
MISMATCH_EXAMPLES = """examples:
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


def _add_mismatch(p: argparse.ArgumentParser) -> None:
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


COMMANDS: tuple[Command, ...] = (
    Command(
        "ls",
        "[ROOT]",
        "recordings under a fileroot and their replays",
        ls.add_arguments,
        ls.run,
        about=ls.ABOUT,
        examples=ls.EXAMPLES,
    ),
    Command(
        "inspect",
        "PATH",
        "what a recording holds, step by step",
        summary.add_arguments,
        summary.run,
        about=summary.ABOUT,
    ),
    Command(
        "show",
        "PATH --step N",
        "one step, trajectory by trajectory",
        show.add_arguments,
        show.run,
        about=show.ABOUT,
        examples=show.EXAMPLES,
    ),
    Command(
        "diff",
        "A [B]",
        "where two recordings or replays first differ",
        diff.add_arguments,
        diff.run,
        about=diff.ABOUT,
        examples=diff.EXAMPLES,
    ),
    Command(
        "plot",
        "A [B] -o PNG",
        "per-step statistics of one or two runs, one picture",
        plot.add_arguments,
        plot.run,
        about=plot.ABOUT,
        examples=plot.EXAMPLES,
    ),
    Command(
        "mismatch",
        "PATH",
        "the training-inference mismatch of each step",
        _add_mismatch,
        cmd_mismatch,
        about=MISMATCH_ABOUT,
        examples=MISMATCH_EXAMPLES,
    ),
    Command(
        "extract",
        "PATH ...",
        "one step as a self-contained reproducer with a test",
        extract.add_arguments,
        extract.run,
        about=extract.ABOUT,
        examples=extract.EXAMPLES,
    ),
    Command(
        "doctor",
        "PATH -- CMD",
        "pre-flight checks of a replay or resume command",
        doctor.add_arguments,
        doctor.run,
        about=doctor.ABOUT,
        examples=doctor.EXAMPLES,
    ),
    Command(
        "verify",
        "PATH",
        "check every payload's checksum and safe loading",
        verify.add_arguments,
        verify.run,
        about=verify.ABOUT,
    ),
    Command(
        "report",
        "PATH -o F",
        "one HTML page: charts, steps, trajectories, tokens",
        report.add_arguments,
        report.run,
        about=report.ABOUT,
        examples=report.EXAMPLES,
    ),
    Command(
        "demo",
        "",
        "record a real GRPO run on CPU and replay it",
        demo_command.add_arguments,
        demo_command.run,
        about=demo_command.ABOUT,
    ),
)


def command_list(commands: tuple[Command, ...] = COMMANDS) -> str:
    """The epilog of ``areal-debug --help``: each command's synopsis and help."""
    lines = [f"areal-debug {c.name} {c.usage}".rstrip() for c in commands]
    width = max(len(line) for line in lines) + 1
    return "\n".join(
        f"{line:<{width}}{c.help}" for line, c in zip(lines, commands, strict=True)
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="areal-debug",
        description="Look into and check recordings and replays.",
        epilog=command_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(
            command.name,
            help=command.about or command.help,
            description=_sentence(command.about),
            epilog=command.examples or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(p)
        p.set_defaults(run=command.run)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from areal_debug.inspect.common import InspectError, MissingPathError

    try:
        return args.run(args)
    except (RecordingError, MissingPathError) as e:
        print(f"areal-debug: {_one_line(e)}", file=sys.stderr)
        return 2
    except InspectError as e:
        print(f"areal-debug: {_one_line(e)}", file=sys.stderr)
        return 1


def _sentence(text: str) -> str | None:
    """``text`` as a sentence atop a command's own --help (none where empty)."""
    return text[0].upper() + text[1:] + "." if text else None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
