# SPDX-License-Identifier: Apache-2.0
"""How every command writes its result: JSON with ``--json``, else a rich view;
and AReaL's loggers kept off stdout meanwhile."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any


def json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def replay_command_arguments(p: argparse.ArgumentParser, logs: str) -> None:
    """``--logs DIR`` (``logs``: what goes there, and its default), ``--json``
    and ``-- REPLAY COMMAND``: the commands that run a replay command as trials
    (selfcheck, bisect)."""
    p.add_argument("--logs", metavar="DIR", help=logs)
    json_flag(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- and the replay command")


def replay_command(args: argparse.Namespace) -> list[str]:
    """The replay command given after ``--``; InspectError where there is none."""
    from areal_debug.inspect.common import InspectError

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise InspectError("Give the replay command after --, as you would run it.")
    return command


def recording_and_replay(
    p: argparse.ArgumentParser, second_recording: bool = False
) -> None:
    """The two positionals of the commands that read a recording and, beside it,
    a replay of it (``report``, ``mismatch``); ``report`` also takes a second
    recording there."""
    p.add_argument("recording", help="recording directory (holds manifest.json)")
    p.add_argument(
        "replay",
        nargs="?",
        help="replay_report.json of a replay of it, or the replay's log directory"
        + (" (or a second recording, set beside it)" if second_recording else ""),
    )


def emit(args: argparse.Namespace, data: Any, renderable: Any = None) -> None:
    """Write a result: JSON with --json, else the rich view."""
    from areal_debug.inspect.common import to_jsonable

    if getattr(args, "json", False) or renderable is None:
        print(json.dumps(to_jsonable(data), indent=1, default=str))
        return
    from rich.console import Console

    # At a terminal rich fits its width; piped, 120 columns keep tables readable.
    # Not cropped: a line rendered wider (a path, never folded) stays whole.
    Console(width=None if sys.stdout.isatty() else 120).print(renderable, crop=False)


@contextlib.contextmanager
def logs_to_stderr() -> Iterator[None]:
    """AReaL's loggers write to stdout; while a command computes, they go to stderr
    so that stdout holds only the command's output (clean --json)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
