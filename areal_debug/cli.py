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

from areal_debug.bisect import command as bisect_command
from areal_debug.inspect.commands import (
    blame,
    diff,
    doctor,
    extract,
    ls,
    mismatch,
    plot,
    report,
    resume,
    show,
    summary,
)
from areal_debug.recording.format import RecordingError
from areal_debug.tooling import demo_command, selfcheck_command


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
        mismatch.add_arguments,
        mismatch.run,
        about=mismatch.ABOUT,
        examples=mismatch.EXAMPLES,
    ),
    Command(
        "blame",
        "RUN --step N",
        "which samples drove a step: each one's share of its loss and gradient",
        blame.add_arguments,
        blame.run,
        about=blame.ABOUT,
        examples=blame.EXAMPLES,
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
        summary.add_arguments,
        summary.verify,
        about=summary.VERIFY_ABOUT,
    ),
    Command(
        "resume",
        "PATH",
        "was each resume lossless: weights, prompts, nothing lost or repeated",
        resume.add_arguments,
        resume.run,
        about=resume.ABOUT,
        examples=resume.EXAMPLES,
    ),
    Command(
        "bisect",
        "--step N --settings K=V... -- CMD",
        "which settings move step N, replaying only it (or --oracle for git bisect run)",
        bisect_command.add_arguments,
        bisect_command.run,
        about=bisect_command.ABOUT,
        examples=bisect_command.EXAMPLES,
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
        "selfcheck",
        "-- CMD",
        "run a replay twice: repeatable here, and the recording's?",
        selfcheck_command.add_arguments,
        selfcheck_command.run,
        about=selfcheck_command.ABOUT,
        examples=selfcheck_command.EXAMPLES,
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

    # Bad input is one line on stderr, no traceback: 2 for a path that is not
    # there (or not a recording), 1 for the rest (docs/cli.md).
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
