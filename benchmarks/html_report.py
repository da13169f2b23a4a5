# SPDX-License-Identifier: Apache-2.0
"""How long does ``areal-debug report`` take on a large recording?

Writes a synthetic 100-step recording of 512 trajectories (64 prompts x 8 samples)
of 2048 tokens each through the real RecordingWriter with its default codec (zstd:
the page reads and decompresses each step it shows, as it does on a real
recording), token ids over Qwen2's 151,936-token vocabulary, each step's
statistics, an anomaly pin and, named in its config, a word-level tokenizer of
that size (so every id decodes, through a Hugging Face tokenizer as large as a
real one), then builds the page with the command's defaults (at most 32
trajectories a step, 1024 tokens each in the token view) and prints the wall time
(median of 3 builds after one dropped) and the page's size. Figures are printed
as ``NAME: VALUE (median of N, range LO to HI; target OP VALUE) ok|MISS``; lines
starting with ``#`` are context.

    .venv/bin/python benchmarks/html_report.py [--steps 100] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import emit, exit_status, median_figure, repeat  # noqa: E402

from areal_debug.inspect.page.report import build_report  # noqa: E402
from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402
from areal_debug.tooling.tiny_task import SPECIAL, word_level_tokenizer  # noqa: E402

PROMPTS, GROUP, LENGTH, PROMPT_LEN = 64, 8, 2048, 256
VOCAB = 151_936  # Qwen2 / Qwen2.5's vocabulary (config.json's vocab_size)
TARGET_SECONDS = 60.0


def build_tokenizer(path: str, vocab: int) -> str:
    """A word-level Hugging Face tokenizer of ``vocab`` tokens in ``path``
    (nothing downloaded): every recorded id decodes, to a piece of its own."""
    words = SPECIAL + [f"w{i}" for i in range(vocab - len(SPECIAL))]
    word_level_tokenizer(words).save_pretrained(path)
    return path


def batch(step: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    """One step: PROMPTS dicts of GROUP rows, LENGTH tokens, completions of
    varying length (the rest padding)."""
    g = torch.Generator().manual_seed(step)
    out = []
    for _ in range(PROMPTS):
        ids = torch.randint(0, vocab, (GROUP, LENGTH), generator=g, dtype=torch.int32)
        ids[:, :PROMPT_LEN] = ids[0, :PROMPT_LEN]
        ends = torch.randint(LENGTH // 2, LENGTH + 1, (GROUP, 1), generator=g)
        pos = torch.arange(LENGTH).expand(GROUP, LENGTH)
        attention = pos < ends
        loss_mask = (attention & (pos >= PROMPT_LEN)).to(torch.int32)
        out.append(
            {
                "input_ids": ids,
                "attention_mask": attention,
                "loss_mask": loss_mask,
                "logprobs": -torch.rand(GROUP, LENGTH, generator=g) * 4 * loss_mask,
                "versions": torch.where(loss_mask.bool(), step, -1).to(torch.int32),
                "rewards": torch.randint(0, 2, (GROUP,), generator=g).float(),
            }
        )
    return out


def record(path: str, steps: int, tokenizer: str, vocab: int) -> None:
    write_manifest(
        path,
        {
            "format_version": 2,
            "created": "bench",
            "experiment_name": "bench",
            "trial_name": "report",
            "layout": {"num_shards": 1, "steps_per_epoch": steps},
            "config": {"tokenizer_path": tokenizer},
        },
    )
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=steps)
    for step in range(steps):
        w.submit_batch(step, batch(step, vocab))
        stats = {
            "ppo_actor/update/actor_loss/avg": 0.01 * step,
            "ppo_actor/update/grad_norm": 1.0 + (5.0 if step == steps // 2 else 0.0),
            "ppo_actor/task_reward/avg": 0.5,
            "ppo_actor/seq_len/avg": 1800.0,
        }
        w.submit_stats(step, stats)
        if step == steps // 2:
            w.submit_pin(step, ["ppo_actor/update/grad_norm > 5"], [step])
    w.close()


def recorded_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args(argv)
    logging.getLogger("DebugDump").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        tokenizer = build_tokenizer(os.path.join(tmp, "tokenizer"), VOCAB)
        rec = os.path.join(tmp, "rec")
        start = time.perf_counter()
        record(rec, args.steps, tokenizer, VOCAB)
        written = time.perf_counter() - start
        print(
            f"# recorded {args.steps} steps x {PROMPTS * GROUP} trajectories x "
            f"{LENGTH} tokens (vocabulary {VOCAB}) in {written:.1f} s, zstd: "
            f"{recorded_bytes(rec) / 2**20:.0f} MiB"
        )
        page = os.path.join(tmp, "page.html")
        results = []

        def build(_: int) -> float:
            start = time.perf_counter()
            results.append(build_report(rec, None, page))
            return time.perf_counter() - start

        seconds = repeat(build, runs=3)
    result = results[-1]
    print(
        f"# page: {result.bytes / 2**20:.1f} MiB, {result.trajectories} trajectories "
        f"shown, {result.trajectories_left_out} left out, texts decoded with the "
        f"{VOCAB}-token tokenizer: {result.tokenizer is not None}"
    )
    name = f"html_report_build_seconds_{args.steps}x{PROMPTS * GROUP}x2k"
    emit(median_figure(name, seconds, "<=", TARGET_SECONDS))
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
