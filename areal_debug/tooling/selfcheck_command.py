# SPDX-License-Identifier: Apache-2.0
"""``areal-debug selfcheck``: its arguments, the command's config read as doctor
reads it, and the result printed (``tooling/selfcheck.py`` runs and compares)."""

from __future__ import annotations

import argparse
import json
import sys

from areal_debug.inspect.commands.output import replay_command_arguments

ABOUT = "run a replay command twice and say whether this machine repeats it, and the recording"
EXAMPLES = """examples:
  areal-debug selfcheck -- bash areal-debug-demo/run_replay.sh
  areal-debug selfcheck --steps 0-2 -- torchrun --nproc-per-node 2 train.py \\
      --config my.yaml debug.replay_rollout_data=true

Each step: "repeatable here, and the recording's"; "repeatable here, but not the
recording's (first: STAGE at WHERE)"; or "STAGE not repeatable here (first: WHERE)".
The two replays run as trials TRIAL_selfcheck-STAMP-a and -b (nothing is
overwritten); their logs go to --logs. Exit code 0 only where both replays agree at
every step."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", metavar="RANGE", help="N or A-B: the steps to replay")
    replay_command_arguments(
        p, "where the two replays' logs go (default: ./selfcheck-STAMP)"
    )


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.commands.output import logs_to_stderr, replay_command
    from areal_debug.inspect.common import InspectError

    command = replay_command(args)
    # AReaL's loggers take the stdout they find when AReaL is first imported:
    # stderr, so that stdout holds only the result.
    with logs_to_stderr():
        from areal_debug import areal_compat
        from areal_debug.config import recorded_trial_of
        from areal_debug.inspect.preflight import doctor
        from areal_debug.tooling.selfcheck import SelfcheckError, run_selfcheck

        run_cmd, env = doctor.script_command(command)
        # AReaL's notes on the config: each replay's log has them, not our output.
        with doctor.environment(env), areal_compat.held_config_warnings():
            config = doctor.load_command_config(run_cmd)
    if not config.debug.replay_rollout_data:
        raise InspectError(
            "selfcheck runs a replay twice: the command has no "
            "debug.replay_rollout_data=true. Add it (and the recording's debug.path "
            "if it is not the default)."
        )
    try:
        result = run_selfcheck(
            command,
            config.cluster.fileroot,
            config.experiment_name,
            recorded_trial_of(config.trial_name),
            steps=args.steps,
            logs_dir=args.logs,
        )
    except SelfcheckError as e:
        raise InspectError(str(e)) from None
    if args.json:
        print(json.dumps(result.to_json(), indent=1, default=str))
    else:
        for step in result.steps:
            print(step.describe())
        a, b = result.trials
        print(
            f"{'Repeatable' if result.repeatable else 'NOT repeatable'} on this "
            f"machine: {len(result.steps)} step(s), replays {a.name} and {b.name} "
            f"(logs in {result.logs_dir})."
        )
    sys.stdout.flush()
    return 0 if result.repeatable else 1
