# SPDX-License-Identifier: Apache-2.0
"""How long does dumping block the training thread?

Builds a realistic RLVR rollout batch (default 128 prompts x 4 samples = 512
sequences of 2048 tokens) and prints, over several steps, the median time the
training thread spends in RecordingWriter.submit_batch (snapshot + enqueue;
serialisation and I/O run on the writer thread) next to the median time of a
plain synchronous torch.save of the same batch, and their ratio, for the two
cases DebugPPOTrainer distinguishes:

- accelerator training: AReaL copies the batch to the device before using it,
  so the host tensors are recorded without a copy (containers are copied);
- CPU training: the trainer uses the very tensors the engine returned, so the
  snapshot clones every tensor.

    .venv/bin/python benchmarks/dump_overhead.py [--prompts 128] [--group 4] [--seqlen 2048]
"""

import argparse
import os
import statistics
import tempfile
import time

import torch

from areal_debug.store_writer import RecordingWriter, write_manifest


def rlvr_batch(prompts: int, group: int, seqlen: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    batch = []
    for _ in range(prompts):
        prompt_len = int(torch.randint(64, 512, (1,), generator=g))
        versions = torch.full((group, seqlen), 3, dtype=torch.int32)
        versions[:, :prompt_len] = -1
        loss_mask = torch.ones(group, seqlen, dtype=torch.int32)
        loss_mask[:, :prompt_len] = 0
        batch.append(
            {
                "input_ids": torch.randint(
                    0, 150_000, (group, seqlen), generator=g, dtype=torch.int32
                ),
                "loss_mask": loss_mask,
                "logprobs": -torch.rand(group, seqlen, generator=g),
                "versions": versions,
                "attention_mask": torch.ones(group, seqlen, dtype=torch.bool),
                "rewards": torch.rand(group, generator=g),
            }
        )
    return batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()

    batch = rlvr_batch(args.prompts, args.group, args.seqlen)
    nbytes = sum(v.numel() * v.element_size() for t in batch for v in t.values())
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        sync_times = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            torch.save(batch, os.path.join(root, f"sync-{i}.pt"))
            sync_times.append(time.perf_counter() - t0)

        results = {}
        for case, clone in (("accelerator", False), ("cpu", True)):
            results[case] = time_dump(
                os.path.join(root, case), batch, args.steps, clone
            )

    sync = statistics.median(sync_times)
    print(
        f"batch: {args.prompts * args.group} sequences x {args.seqlen} tokens, "
        f"{nbytes / 2**20:.1f} MiB of tensors, median of {args.steps} steps"
    )
    print(f"synchronous torch.save:                       {sync * 1e3:8.1f} ms")
    for case, (block, write) in results.items():
        print(
            f"[{case:<11}] training thread blocked by dump: {block * 1e3:8.2f} ms"
            f"   ratio {block / sync:.3f}   (background write {write * 1e3:.1f} ms)"
        )
    print("target: ratio <= 0.10")


def time_dump(path: str, batch, steps: int, clone: bool) -> tuple[float, float]:
    write_manifest(
        path,
        {
            "format_version": 1,
            "created": "bench",
            "experiment_name": "b",
            "trial_name": "b",
            "layout": {"num_shards": 1, "steps_per_epoch": steps},
        },
    )
    writer = RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=steps, clone_tensors=clone
    )
    blocked, write_times = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        writer.submit_batch(i, batch)
        t1 = time.perf_counter()
        writer.flush()  # stands in for the training step, while the writer works
        blocked.append(t1 - t0)
        write_times.append(time.perf_counter() - t1)
    writer.close()
    return statistics.median(blocked), statistics.median(write_times)


if __name__ == "__main__":
    main()
