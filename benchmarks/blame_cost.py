# SPDX-License-Identifier: Apache-2.0
"""What blaming a step costs: a replay of the CPU demo's step 0 with
``debug.blame_steps=0`` against the same replay without, wall time of the whole
run (start-up included, as a user waits for it), paired in alternating order.

The blame passes are one forward and backward pass of the whole mini-batch per
sample plus one for each mini-batch (``stages/blame.py``): on the demo, 32 samples
and two mini-batches, 34 passes of a step that trains in well under a second. The
figure's target says that blaming a step of the demo stays within three plain
replays of it; the blame file's own seconds, per sample, are printed beside it.

    .venv/bin/python benchmarks/blame_cost.py --workdir DIR [--reuse] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_run import add_demo_arguments, run_demo, run_logged  # noqa: E402
from figures import emit, exit_status, median_figure, paired, repeat  # noqa: E402

TARGET = 3.0
STEP = 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_demo_arguments(ap, "steps of the demo to record (without --reuse)")
    ap.add_argument("--runs", type=int, default=2, help="paired repetitions")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="blame-cost-"))
    if not args.reuse:
        run_demo(workdir, args.steps)
    replay = ["bash", str(workdir / "run_replay.sh"), f"debug.replay_end_step={STEP}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def plain() -> float:
        return run_logged(
            workdir,
            "bench_plain",
            [*replay, "debug.replay_trial_name=bench_plain"],
            env,
        )

    def blamed() -> float:
        return run_logged(
            workdir,
            "bench_blame",
            [
                *replay,
                "debug.replay_trial_name=bench_blame",
                f"debug.blame_steps={STEP}",
            ],
            env,
        )

    # Each repetition is two whole processes: nothing to warm up inside one.
    pairs = repeat(lambda i: paired(i, plain, blamed), args.runs, warmup=0)
    (parts,) = workdir.glob(f"root/logs/*/*/bench_blame/blame/step-{STEP:06d}.json")
    doc = json.loads(parts.read_text())
    samples = len(doc["samples"])
    print(
        f"# the demo's step {STEP}: {samples} samples, "
        f"{len(doc['mini_batches'])} mini-batch(es); blame passes {doc['seconds']:.1f} s "
        f"({doc['seconds'] / max(samples, 1):.2f} s a sample); plain replays "
        + ", ".join(f"{p:.1f} s" for p, _ in pairs)
        + "; blamed "
        + ", ".join(f"{b:.1f} s" for _, b in pairs)
    )
    emit(
        median_figure(
            f"blamed_vs_plain_replay_tiny_cpu_{samples}_samples",
            [b / p for p, b in pairs],
            "<=",
            TARGET,
        )
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
