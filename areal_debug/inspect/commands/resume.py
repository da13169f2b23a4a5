# SPDX-License-Identifier: Apache-2.0
"""``areal-debug resume``: was each resume inside a recording lossless?
Exit status 0 only where every resume started from the interrupted run's
weights and redid its steps on the same prompts, so that it lost or repeated
none; 3 where one did not."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "Was each resume inside a dump recording lossless (the interrupted run's "
    "weights, its steps redone on the same prompts, none lost or repeated)? "
    "Exit status 0 where so, or where there is no resume; 3 where not. "
    "What each line means: docs/cli.md, resume."
)
EXAMPLES = """examples:
  areal-debug resume REC            each resume and whether it was lossless
  areal-debug resume REC --json     the same as JSON (prompts by digest)"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="recording directory (holds manifest.json)")
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.common import require_path

    with logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.inspect.resume import check_resumes
        from areal_debug.recording.reader import RecordingReader

        reader = RecordingReader(require_path(args.path, "The recording"))
        check = check_resumes(reader)
    emit(args, check, render.resume_check(check))
    return 0 if check.lossless else 3
