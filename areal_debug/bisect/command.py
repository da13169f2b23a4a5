# SPDX-License-Identifier: Apache-2.0
"""``areal-debug bisect``: what moved step N, with the recorded step as the oracle."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from areal_debug.inspect.commands.output import (
    replay_command,
    replay_command_arguments,
)

ABOUT = (
    "Replays step N of a recording (from the latest recover checkpoint kept before "
    "it, else from step 0) as trials and finds what moves it. With --settings: the "
    "smallest set of the given K=V settings that moves step N (delta debugging), the "
    "first stage each culprit moves, and those that leave it bit for bit (harmless). "
    "With --areal-source DIR --good REV --bad REV: the first AReaL commit between them "
    "that moves step N, each revision a worktree on PYTHONPATH in front of the "
    "installed AReaL, one that does not import skipped. "
    "With --oracle: one trial of the command as it is, exit 0 where step N replays "
    "bit for bit, 1 where it moves, 125 where it cannot say: git bisect run's "
    "statuses, for bisecting your own code. REPLAY_CMD is the replay command you "
    "run (it has debug.replay_rollout_data=true); each trial appends its overrides"
)
EXAMPLES = """examples:
  areal-debug bisect --step 3 --settings actor.optimizer.lr=1e-5 actor.eps_clip=0.3 \\
      -- python -m areal_debug.launcher.local train.py --config my.yaml \\
         debug.replay_rollout_data=true
  areal-debug bisect --step 3 --areal-source ~/AReaL --good v2.0.0 --bad main \\
      -- python train.py --config my.yaml debug.replay_rollout_data=true
  git bisect run areal-debug bisect --step 3 --oracle -- python train.py ..."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--step", type=int, required=True, help="the step to bisect")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--settings", nargs="+", metavar="K=V", help="settings to bisect over"
    )
    what.add_argument(
        "--areal-source",
        metavar="DIR",
        help="a git checkout of AReaL (its root holds areal/): bisect its commits",
    )
    what.add_argument(
        "--oracle",
        action="store_true",
        help="one trial; exit 0 same, 1 moved, 125 skip (for git bisect run)",
    )
    p.add_argument("--good", metavar="REV", help="with --areal-source: step N same")
    p.add_argument("--bad", metavar="REV", help="with --areal-source: step N moved")
    replay_command_arguments(
        p, "where each trial's log and report go (default: ./bisect-stepN-STAMP)"
    )


def run(args: argparse.Namespace) -> int:
    from areal_debug.bisect.settings import bisect_settings
    from areal_debug.bisect.trial import BisectError, TrialRunner

    command = replay_command(args)
    for setting in args.settings or []:
        if "=" not in setting:
            raise SystemExit(
                f"areal-debug bisect: --settings takes K=V, not {setting!r}"
            )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = args.logs or f"bisect-step{args.step}-{stamp}"
    runner = TrialRunner(command, args.step, os.path.abspath(logs))
    say = (lambda text: print(text, file=sys.stderr)) if args.json else print
    try:
        if args.oracle:
            result = runner.run("oracle", [])
            say(result.line())
            if args.json:
                print(json.dumps(result.to_json(), indent=1))
            return result.outcome.exit_status
        if args.areal_source:
            if not (args.good and args.bad):
                raise BisectError("--areal-source needs --good REV and --bad REV.")
            from areal_debug.bisect.source import bisect_source

            found = bisect_source(runner, args.areal_source, args.good, args.bad, say)
            if args.json:
                print(json.dumps(found.to_json(), indent=1))
            else:
                say(found.line())
            return 0
        found = bisect_settings(runner, args.settings, say)
    except BisectError as e:
        print(f"areal-debug bisect: {e}", file=sys.stderr)
        return 125 if args.oracle else 2
    if args.json:
        print(json.dumps(found.to_json(), indent=1))
        return 0
    say(f"step {found.step}: {len(found.trials)} trials (logs in {logs})")
    if not found.culprits:
        say("none of the settings moves it: all harmless")
    for key, trial in found.moved_by.items():
        say(
            f"MOVES step {found.step}: {key}, first at {trial.first_stage} ({trial.where})"
        )
    if found.harmless:
        say(f"harmless: {' '.join(found.harmless)}")
    return 0
