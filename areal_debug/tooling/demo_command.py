# SPDX-License-Identifier: Apache-2.0
"""``areal-debug demo``: its arguments, and the call of :func:`demo.run_demo`.

Apart from ``demo.py`` because the CLI's table loads every command's arguments for
``--help``, and ``demo.py`` loads the example's commands and HTTP client (about 50
ms) that only the demo itself needs.
"""

from __future__ import annotations

import argparse
import sys

ABOUT = "record a real GRPO run on CPU and replay it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workdir", default="areal-debug-demo", help="where everything goes"
    )
    p.add_argument("--steps", type=int, default=4, help="training steps to record")
    p.add_argument(
        "--nproc",
        type=int,
        choices=(1, 2),
        default=1,
        help="trainer processes (data-parallel size)",
    )
    p.add_argument(
        "--single-controller",
        action="store_true",
        help="run both sides in AReaL's single-controller mode (scheduler.type=local)",
    )
    p.add_argument(
        "--logprob-fault",
        metavar="SPEC",
        help="the CPU server reports the log-probs of one step off, to see a "
        "training-inference mismatch spike: e.g. 'version=2,offset=4,share=0.25' "
        "(step 2: a quarter of the generated tokens +4 nats) or 'version=2,nan=true'",
    )
    p.add_argument(
        "--interrupt-after",
        type=int,
        metavar="N",
        help="kill the dump run (SIGKILL, as a crashed node) once step N + 1 is "
        "recorded, resume it with AReaL's recover.mode=on (a recover checkpoint "
        "every step unless your overrides name recover.*), check the resume "
        "(areal-debug resume), then replay as usual",
    )
    p.add_argument(
        "--slow-rollouts",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the CPU server holds each answer back SECONDS: rollouts slower than "
        "AReaL's 1 s wait, as on a GPU cluster, where AReaL draws the next batch "
        "before a step's recover checkpoint (with --interrupt-after, a resume then "
        "skips it unless debug.lossless_resume=true)",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides for both runs, as AReaL takes them "
        "(e.g. recover.mode=on ++recover.freq_steps=1); run_replay.sh repeats them",
    )


def run(args: argparse.Namespace) -> int:
    from areal_debug.tooling.demo import DemoError, run_demo

    try:
        return run_demo(
            args.workdir,
            steps=args.steps,
            nproc=args.nproc,
            single_controller=args.single_controller,
            overrides=tuple(args.overrides),
            logprob_fault=args.logprob_fault,
            interrupt_after=args.interrupt_after,
            slow_rollouts=args.slow_rollouts,
        )
    except DemoError as e:
        print(f"areal-debug demo: {e}", file=sys.stderr)
        return 1
