# SPDX-License-Identifier: Apache-2.0
"""Stage digests: what do they cost per step, measured, and extrapolated to 7B?

Measured: the CPU demo's dump run (a real GRPO run through AReaL's PPOTrainer,
tiny Qwen2) digests every stage of every step; each rank's ``stages.json``
holds ``digest_seconds``, the wall-clock time spent digesting (the transfer to
the host waits for the device). The step's training time is the sum of the
stats' ``timeperf/`` entries of the stages digested: recompute_logp, ref_logp,
critic_values, compute_advantage and train_step (the digests run inside them).

Extrapolated: digests are memory-bound reads (no matmuls), training is
FLOP-bound, so the arithmetic for a 7B model on one accelerator is printed with
every assumption next to it.

    .venv/bin/python benchmarks/stage_digest_cost.py [--steps 4] [--workdir DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import figure  # noqa: E402

from areal_debug.recording.format import STAGES_FILE, STATS  # noqa: E402

TRAIN_TIMINGS = (
    "timeperf/recompute_logp",
    "timeperf/ref_logp",
    "timeperf/critic_values",
    "timeperf/compute_advantage",
    "timeperf/train_step",
)
TARGET = 0.01

# The 7B extrapolation's assumptions (one H100 SXM, bf16 weights, fp32 grads).
PARAMS_7B = 7.0e9
TOKENS_PER_STEP = 512 * 2048  # the batch: 512 sequences x 2048 tokens
HBM_BYTES_PER_S = 3.35e12
PEAK_FLOPS = 989e12
MFU = 0.40
MINI_BATCHES = 4  # one gradient digest per mini-batch, one weight digest per step
# Bytes moved per digested element: read the value (2-4 B), write and read its
# int64 copy (16 B), read the index (8 B), write and read the product (16 B).
BYTES_PER_ELEMENT = 44


def run_demo(workdir: Path, steps: int) -> None:
    demo = subprocess.run(
        [sys.executable, "-m", "areal_debug.cli", "demo"]
        + ["--workdir", str(workdir), "--steps", str(steps)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
    )
    if demo.returncode != 0:
        print(demo.stdout[-2000:] + demo.stderr[-2000:], file=sys.stderr)
        raise SystemExit(1)


def measured(workdir: Path) -> list[tuple[int, float, float]]:
    """(step, seconds digesting on the slowest rank, training seconds) per step."""
    out = []
    pattern = str(workdir / "root" / "*" / "*" / "areal_debug_recording" / "step-*")
    for step_dir in sorted(glob.glob(pattern)):
        stages_path = os.path.join(step_dir, STAGES_FILE)
        if not os.path.exists(stages_path):
            continue
        with open(stages_path) as f:
            stages = json.load(f)
        with open(os.path.join(step_dir, STATS)) as f:
            timings = json.load(f)["timings"]
        train = sum(timings.get(k, 0.0) for k in TRAIN_TIMINGS)
        out.append((stages["global_step"], max(stages["digest_seconds"]), train))
    return out


def extrapolate_7b() -> tuple[float, list[str]]:
    step_flops = 8 * PARAMS_7B * TOKENS_PER_STEP  # recompute fwd 2NT + train 6NT
    step_s = step_flops / (PEAK_FLOPS * MFU)
    elements = PARAMS_7B * (MINI_BATCHES + 1)
    digest_s = elements * BYTES_PER_ELEMENT / HBM_BYTES_PER_S
    lines = [
        f"# 7B step: 8 x {PARAMS_7B:.0e} params x {TOKENS_PER_STEP} tokens = "
        f"{step_flops:.3g} FLOP at {MFU:.0%} of {PEAK_FLOPS:.3g} FLOP/s = {step_s:.1f} s",
        f"# 7B digests: {PARAMS_7B:.0e} params x ({MINI_BATCHES} gradient + 1 weight "
        f"digests) x {BYTES_PER_ELEMENT} B / {HBM_BYTES_PER_S:.3g} B/s = "
        f"{digest_s * 1e3:.0f} ms (per-token stages: {TOKENS_PER_STEP} tokens x a few "
        "tensors, negligible)",
    ]
    return digest_s / step_s, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    ap.add_argument(
        "--reuse", action="store_true", help="read the demo already run in --workdir"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp)
        if not (args.reuse and args.workdir):
            run_demo(workdir, args.steps)
        steps = measured(workdir)
    if not steps:
        print(f"no stages.json under {workdir}", file=sys.stderr)
        return 1
    for step, digest, train in steps:
        print(
            f"# step {step}: digests {digest * 1e3:.2f} ms of {train * 1e3:.0f} ms "
            "training (tiny model, CPU)"
        )
    # The median step: the first pays one-time costs (a 2 s warm-up) that would
    # hide the digests' share.
    tiny = statistics.median(d / t for _, d, t in steps)
    print(
        "# the digests read every parameter 3x a step (2 gradient, 1 weight) while "
        "the tiny run trains on a few hundred tokens: the share falls as tokens per "
        "step grow (training ~ params x tokens, digests ~ params)"
    )
    print(figure("stage_digests_vs_train_step_tiny_cpu", tiny, "<=", TARGET))
    ratio, lines = extrapolate_7b()
    for line in lines:
        print(line)
    print(figure("stage_digests_vs_train_step_7b_extrapolated", ratio, "<=", TARGET))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
