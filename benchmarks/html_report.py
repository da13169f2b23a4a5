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
(median of 3 builds after one dropped) and the page's size; then opens the page
in headless chromium (Debian's, driven by Playwright, as the tests do; a SKIP
line where either is missing) and prints the seconds from navigation to the
page drawn, and the seconds a click on a step, then on a trajectory, takes to
draw its view (each the median of 5 after one dropped). Figures are printed
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
from figures import (  # noqa: E402
    emit,
    exit_status,
    figure,
    median_figure,
    repeat,
    skipped,
)

from areal_debug.inspect.page.report import build_report  # noqa: E402
from areal_debug.recording.writer.recording_writer import RecordingWriter  # noqa: E402
from areal_debug.recording.writer.start import write_manifest  # noqa: E402
from areal_debug.tooling.tiny_task import SPECIAL, word_level_tokenizer  # noqa: E402

PROMPTS, GROUP, LENGTH, PROMPT_LEN = 64, 8, 2048, 256
VOCAB = 151_936  # Qwen2 / Qwen2.5's vocabulary (config.json's vocab_size)
TARGET_SECONDS = 60.0
# One file that opens anywhere: a mail attachment's size is not the budget (the
# cap is: --max-per-step), a browser's is; and it answers at once.
TARGET_MIB = 64.0
TARGET_OPEN_SECONDS = TARGET_CLICK_SECONDS = 1.0
CHROMIUM = "/usr/bin/chromium"


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
            f"# page: {result.bytes / 2**20:.1f} MiB, {result.trajectories} "
            f"trajectories shown, {result.trajectories_left_out} left out, texts "
            f"decoded with the {VOCAB}-token tokenizer: {result.tokenizer is not None}"
        )
        shape = f"{args.steps}x{PROMPTS * GROUP}x2k"
        emit(
            median_figure(
                f"html_report_build_seconds_{shape}", seconds, "<=", TARGET_SECONDS
            )
        )
        emit(figure(f"html_report_mib_{shape}", result.bytes / 2**20, "<=", TARGET_MIB))
        browse(page, shape, args.steps // 2)
    return exit_status()


def browse(page_path: str, shape: str, step: int) -> None:
    """Open the page in headless chromium: seconds to the page drawn, and to a
    step's and a trajectory's view drawn after a click (layout included)."""
    names = [
        f"html_report_{what}_seconds_{shape}"
        for what in ("open", "click_step", "click_trajectory")
    ]
    why = None
    if not os.access(CHROMIUM, os.X_OK):
        why = f"no {CHROMIUM} (Debian package chromium; .ci/run installs it)"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            why = "the playwright package is not installed (make setup installs it)"
    if why:
        for name in names:
            emit(skipped(name, why))
        return
    url = "file://" + os.path.abspath(page_path)
    # A click's handler draws synchronously; reading offsetHeight forces the
    # layout, so the time is the view's, not only the script's.
    click = """sel => { const t = performance.now();
        document.querySelector(sel).click(); document.body.offsetHeight;
        return (performance.now() - t) / 1000; }"""
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        def open_once(_: int) -> float:
            start = time.perf_counter()
            page.goto(url, wait_until="load")
            page.wait_for_selector("#steps .stepbtn")
            return time.perf_counter() - start

        def step_once(_: int) -> float:
            return page.evaluate(click, f".stepbtn[data-step='{step}']")

        def row_once(_: int) -> float:
            return page.evaluate(click, "#traj-rows tr")

        opened = repeat(open_once, runs=5)
        clicked_step = repeat(step_once, runs=5)
        clicked_row = repeat(row_once, runs=5)
        browser.close()
    for name, values in zip(names, (opened, clicked_step, clicked_row)):
        emit(median_figure(name, values, "<=", TARGET_CLICK_SECONDS))


if __name__ == "__main__":
    sys.exit(main())
