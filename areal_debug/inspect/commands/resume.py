# SPDX-License-Identifier: Apache-2.0
"""``areal-debug resume``: was each resume inside a recording lossless?
Exit status 0 only where every resume started from the interrupted run's
weights and redid its steps on the same prompts, so that it lost or repeated
none; 3 where one did not."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "Each resume inside a dump recording (AReaL's recover.mode): the step it "
    "resumed at; whether the weights it started from are those the interrupted run "
    "had after the step before (their digests); whether each redone step consumed "
    "the same prompts as the attempt it superseded (superseded/<time>/); and, where "
    "a redone step took other prompts, those an earlier step of the epoch had "
    "already consumed (repeated) and the superseded attempt's that no kept step "
    "consumed (lost). Exit status 0 only where the resumes lost and repeated "
    "nothing, 3 where they did."
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
