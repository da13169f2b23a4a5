# SPDX-License-Identifier: Apache-2.0
"""How long does ``areal-debug diff REC_A REC_B`` take on two long runs?

Writes a synthetic 1,000-step recording of 512 trajectories a step (64 prompts x
8 samples, 16 tokens each: the comparison reads the steps' metadata, so the
payloads' length does not matter to it) through the real RecordingWriter, makes
a second one from it (hard links, then one prompt of step 700 replaced by a
prompt of step 10, re-recorded with its metadata as a dump run writes it), and
times the whole comparison the command makes (median of 3 after one dropped):
every step's prompts, completions, rewards and versions from the metadata, the
run's prompt totals, and the payloads of the one step whose bytes differ.
Figures are printed as ``NAME: VALUE (median of N, range LO to HI; target OP
VALUE) ok|MISS``; lines starting with ``#`` are context.

    .venv/bin/python benchmarks/recording_diff.py [--steps 1000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import emit, exit_status, median_figure, repeat  # noqa: E402

from areal_debug.inspect.diff.two_runs import diff_recordings  # noqa: E402
from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402

PROMPTS, GROUP, LENGTH, PROMPT_LEN = 64, 8, 16, 8
TARGET_SECONDS = 10.0
PLANTED, TAKEN_FROM = 700, 10


def batch(step: int) -> list[dict[str, torch.Tensor]]:
    """One step: PROMPTS dicts of GROUP rows (a prompt and its samples)."""
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, 50_000, (PROMPTS, GROUP, LENGTH), generator=g)
    ids[:, :, :PROMPT_LEN] = ids[:, :1, :PROMPT_LEN]
    loss = torch.zeros(GROUP, LENGTH, dtype=torch.int32)
    loss[:, PROMPT_LEN:] = 1
    return [
        {
            "input_ids": ids[p].to(torch.int32),
            "attention_mask": torch.ones(GROUP, LENGTH, dtype=torch.bool),
            "loss_mask": loss,
            "logprobs": -torch.rand(GROUP, LENGTH, generator=g) * loss,
            "versions": torch.where(loss.bool(), step, -1).to(torch.int32),
            "rewards": torch.randint(0, 2, (GROUP,), generator=g).float(),
        }
        for p in range(PROMPTS)
    ]


def record(path: str, steps: dict[int, list], steps_per_epoch: int) -> None:
    if not os.path.exists(os.path.join(path, "manifest.json")):
        write_manifest(
            path,
            {
                "format_version": 2,
                "created": "bench",
                "experiment_name": "bench",
                "trial_name": os.path.basename(path),
                "layout": {"num_shards": 1, "steps_per_epoch": steps_per_epoch},
                "config": {},
            },
        )
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=steps_per_epoch)
    for step, value in steps.items():
        w.submit_batch(step, value)
    w.close()


def linked_copy(src: str, dst: str) -> None:
    """``src`` hard-linked file by file: files the writer replaces (it writes
    a new file and renames it over the old) part; the rest share their bytes."""
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in files:
            os.link(os.path.join(root, name), os.path.join(dst, rel, name))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args(argv)
    logging.getLogger("DebugDump").setLevel(logging.WARNING)
    planted = min(PLANTED, args.steps - 1)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        start = time.perf_counter()
        record(a, {s: batch(s) for s in range(args.steps)}, args.steps)
        written = time.perf_counter() - start
        linked_copy(a, b)
        changed = batch(planted)
        changed[3] = batch(TAKEN_FROM)[5]
        shutil.rmtree(os.path.join(b, f"step-{planted:06d}"))
        record(b, {planted: changed}, args.steps)
        print(
            f"# recorded {args.steps} steps x {PROMPTS * GROUP} trajectories in "
            f"{written:.0f} s; the copy consumed step {TAKEN_FROM}'s prompt 5 in "
            f"place of prompt 3 at step {planted}"
        )
        results = []

        def compare(_: int) -> float:
            start = time.perf_counter()
            results.append(diff_recordings(a, b))
            return time.perf_counter() - start

        seconds = repeat(compare, runs=3)
    found = results[-1].batches
    print(
        f"# the diff: runs part at step {found.first_step} in {found.first_parts}; "
        f"{found.counts['only_in_a']} prompt only in a, {found.counts['more_in_b']} "
        "more often in b"
    )
    name = f"recording_diff_seconds_{args.steps}x{PROMPTS * GROUP}"
    emit(median_figure(name, seconds, "<=", TARGET_SECONDS))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
