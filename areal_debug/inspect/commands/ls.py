# SPDX-License-Identifier: Apache-2.0
"""``areal-debug ls``: recordings under a fileroot, and the replays run against
them (``inspect/listing.py``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "list recordings under a fileroot (or one recording) and the replays run "
    "against them"
)
EXAMPLES = """examples:
  areal-debug ls /storage/areal                  every recording under a fileroot
  areal-debug ls /storage/areal/exp/trial/areal_debug_recording
  areal-debug ls /storage/areal --json | jq '.[].replays'

Columns: steps complete (and incomplete or stopped ones), steps pinned against
retention (anomalies, debug.pin_steps), kept recover checkpoints, size on disk,
format version, and each replay_report.json whose "recording" is this one with
its verdict (replays write it into AReaL's log directory of the replay trial)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "root", nargs="?", default=".", help="fileroot or recording (default .)"
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    with logs_to_stderr():
        from areal_debug.inspect import listing, render

        found = listing.list_recordings(args.root)
    emit(args, found, render.listing(found))
    return 0
