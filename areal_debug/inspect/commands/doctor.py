# SPDX-License-Identifier: Apache-2.0
"""``areal-debug doctor``: pre-flight checks of a replay or resume command
(``inspect/preflight/doctor.py``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = "pre-flight checks of a replay or resume command against a recording"
EXAMPLES = """examples:
  areal-debug doctor REC -- python -m areal_debug.launcher.local train.py \\
      --config my.yaml debug.replay_rollout_data=true debug.replay_start_step=3
  areal-debug doctor REC -- torchrun --nproc-per-node 2 train.py --config my.yaml \\
      debug.replay_rollout_data=true actor.optimizer.lr=1e-5
  areal-debug doctor REC -- my.yaml
  areal-debug doctor REC -- bash areal-debug-demo/run_replay.sh actor.optimizer.lr=1e-5

Checks: training config differences from the recording (model, sequence lengths,
sampling, optimizer, batch and group sizes, reward normalisation), missing or
incomplete steps, a whole recover checkpoint for the start step, determinism,
AReaL/torch/areal-debug versions, a trial or wandb run that would write into the
recorded run's, and free disk. Exit code 1 when any finding is an error."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- and the command line")
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    # REMAINDER keeps the "--" that separates the command from doctor's options.
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    with logs_to_stderr():
        from areal_debug.inspect import render
        from areal_debug.inspect.preflight import doctor

        report = doctor.doctor(args.path, command)
    emit(args, report, render.doctor_report(report))
    return 1 if report.errors else 0
