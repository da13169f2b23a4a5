# SPDX-License-Identifier: Apache-2.0
"""The ``areal-debug`` command: look into and check recordings.

areal-debug inspect PATH     what a recording holds, step by step
areal-debug verify PATH      check every payload's checksum and safe loading
"""

from __future__ import annotations

import argparse
import os
import sys

from areal_debug.store_format import STATS, RecordingError, step_dirname
from areal_debug.store_reader import RecordingReader, format_ranges


def cmd_inspect(args) -> int:
    reader = RecordingReader(args.path)
    m = reader.manifest
    layout = m.layout
    print(f"recording   {reader.path}")
    print(
        f"format      v{m.format_version} (areal-debug {m.areal_debug_version or '?'}, "
        f"areal {m.areal_version or '?'}, torch {m.torch_version or '?'})"
    )
    print(f"run         {m.experiment_name}/{m.trial_name}, created {m.created}")
    print(
        f"layout      {layout.mode}, world size {layout.world_size or '?'}, "
        f"training data-parallel size {layout.training_dp_size}, "
        f"{reader.num_shards} shard(s) per step, {reader.steps_per_epoch} steps/epoch"
    )
    steps = reader.available_steps()
    print(
        f"steps       {format_ranges(steps)} complete"
        + (
            f"; incomplete: {format_ranges(reader.incomplete_steps())}"
            if reader.incomplete_steps()
            else ""
        )
    )
    for stop in reader.stopped():
        print(
            f"stopped     shard {stop.get('shard')} stopped recording at step "
            f"{stop.get('step')}: {stop.get('error')} ({stop.get('time')})"
        )
    print()
    print(
        f"{'step':>6} {'epoch':>5} {'trajs':>6} {'tokens':>9} {'versions':>9} {'MiB':>8}  stats"
    )
    for step in steps:
        meta = reader.step_meta(step)
        size = sum(s["bytes"] for s in meta["shards"]) / 2**20
        v = meta.get("policy_version")
        versions = f"{v[0]}-{v[1]}" if v else "-"
        has_stats = os.path.exists(os.path.join(reader.path, step_dirname(step), STATS))
        print(
            f"{step:>6} {meta['epoch']:>5} {meta['num_trajectories']:>6} {meta['num_tokens']:>9} "
            f"{versions:>9} {size:>8.2f}  {'yes' if has_stats else 'no'}"
        )
    return 0


def cmd_verify(args) -> int:
    reader = RecordingReader(args.path)
    steps = reader.available_steps()
    checked, problems = 0, []
    for step in steps:
        for shard in range(reader.step_meta(step)["num_shards"]):
            checked += 1
            try:
                reader.load_shard(step, shard)
            except RecordingError as e:
                problems.append(str(e))
    bad_payloads = len(problems)
    for step in reader.incomplete_steps():
        problems.append(
            f"step {step} is incomplete (no step.json): a head did not finish "
            "writing it; replay cannot use it."
        )
    for stop in reader.stopped():
        # Not a defect of the recording: what was recorded before is whole.
        print(
            f"NOTE shard {stop.get('shard')} stopped recording at step "
            f"{stop.get('step')}: {stop.get('error')}"
        )
    for p in problems:
        print(f"FAIL {p}")
    print(
        f"{checked - bad_payloads}/{checked} payloads of {len(steps)} steps verified; "
        f"{len(problems)} problem(s)."
    )
    return 1 if problems else 0


def cmd_demo(args) -> int:
    from areal_debug.tooling.demo import DemoError, run_demo

    try:
        return run_demo(
            args.workdir,
            steps=args.steps,
            nproc=args.nproc,
            single_controller=args.single_controller,
        )
    except DemoError as e:
        print(f"areal-debug demo: {e}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="areal-debug", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="show what a recording holds")
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("verify", help="check every payload's checksum and safe loading")
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("demo", help="record a real GRPO run on CPU and replay it")
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
    p.set_defaults(func=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RecordingError as e:
        print(f"areal-debug: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
