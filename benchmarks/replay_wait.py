# SPDX-License-Identifier: Apache-2.0
"""Replay: how long does the training loop wait for recorded data?

Runs the CPU demo (``areal-debug demo``: a real GRPO dump against the CPU server,
then its replay through AReaL's trainer with no inference engine) and reads the
replay report. Each step's ``replay/wait_for_data`` is the time the loop waited on
the recording after prefetching (the next step is read while the current one
trains); the step time is the sum of the step's ``timeperf/*`` entries. The
figure is the whole wait over the whole step time, every step counted: the first
one too, whose read starts only as the replay starts (before_train), with no
training step before it to hide behind (a median of per-step ratios left it out).

    .venv/bin/python benchmarks/replay_wait.py [--steps 4] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_run import run_demo  # noqa: E402
from figures import emit, exit_status, pooled_figure  # noqa: E402

from areal_debug.compare.replay import REPLAY_WAIT  # noqa: E402
from areal_debug.tooling.demo import load_report  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        run_demo(workdir, args.steps)
        steps = load_report(workdir)["steps"]
    waits = [s["timings"][REPLAY_WAIT] for s in steps]
    step_times = [
        sum(v for k, v in s["timings"].items() if k.startswith("timeperf/"))
        for s in steps
    ]
    for s, w, t in zip(steps, waits, step_times, strict=True):
        print(
            f"# step {s['global_step']}: waited {w * 1e3:.2f} ms for data, "
            f"step {t * 1e3:.0f} ms (rollout {s['timings']['timeperf/rollout'] * 1e3:.1f} ms)"
        )
    # The target: reading the recording costs a replay at most 1% of its time,
    # whichever step the reads fall on (the same bar as when the figure was a
    # median over the prefetched steps: the wait a user sees is the whole one).
    emit(
        pooled_figure(
            "replay_wait_for_data_vs_step_time", waits, step_times, "<=", 0.01
        )
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
