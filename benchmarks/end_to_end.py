# SPDX-License-Identifier: Apache-2.0
"""End to end, in real AReaL runs on CPU: what recording costs a training step,
and what a replay step costs against the step it replays.

The demo's task and example script (``areal-debug demo``: GRPO through AReaL's
trainer and FSDP engine, rollouts from the CPU server speaking SGLang's
protocol), with a model large enough that a step takes seconds, not the demo's
milliseconds, whose steps measure fixed costs only: Qwen2 with the demo's
tokenizer, hidden size 256, 4 layers (3 M parameters), float32; 16 prompts x 4
samples a step, each prompt the demo's question after 120 words of context
(about 8,600 tokens a step). Long prompts make the step's training realistic
against the per-parameter costs (the weights' and gradients' digests) at little
cost to the CPU server, which generates one token at a time but reads a prompt
in one pass: with the demo's 8-token prompts a step trains on 1,000 tokens, a
thousandth of a real step's tokens per parameter. A step's time is the time between two of AReaL's own "Train
step N/M done." log lines (``StatsLogger.commit``): everything the loop does in
a step, rollout and weight update included, as a user's step clock sees it; the
first step (start-up, compilation) is left out.

- ``recording_on_vs_off_step_time``: the same run with ``debug.dump_rollout_data``
  on (stage digests and kept trainer log-probs at their defaults) against off,
  in pairs, alternating which runs first, each run a fresh trainer and a fresh
  server (the same seed and data order: the same prompts at each step). Each
  step is paired with the same step of the other run of its pair: its on-time
  over its off-time, minus 1; the median over every step of every pair (runs of
  the same setting differ by a few percent, as much as the cost measured: the
  more pairs of steps, the steadier the median). Target 0.03: a recorder left
  on for a whole run must cost less than the run-to-run spread users already
  accept.
- ``replay_step_vs_recorded_step_time``: the last dump's recording replayed (the
  demo's ``run_replay.sh``: no inference server), its steps' whole time over the
  recorded steps'. Target 1: a replay step must not cost more than the step it
  brings back; it skips the rollout and the weight update.

    .venv/bin/python benchmarks/end_to_end.py [--pairs 3] [--steps 4] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_run import run_logged  # noqa: E402
from figures import (  # noqa: E402
    emit,
    exit_status,
    median_figure,
    paired,
    pooled_figure,
    repeat,
)

from areal_debug.testing import end_process, run_env  # noqa: E402
from areal_debug.tooling.demo import (  # noqa: E402
    mode_command,
    script_env,
    start_server,
    write_replay_script,
)
from areal_debug.tooling.tiny_task import (  # noqa: E402
    DIGITS,
    arithmetic_rows,
    build_tiny_model,
)

# The step's size: 64 sequences of about 16 tokens, trained in AReaL's two
# mini-batches after the recomputed log-probs.
SIZE = ("train_dataset.batch_size=16", "gconfig.n_samples=4")
HIDDEN, LAYERS, CONTEXT = 256, 4, 120
# AReaL's StatsLogger.commit: "<timestamp> StatsLogger INFO: Epoch e/E Step s/S
# Train step N/M done." (ANSI colours around it in the log).
COMMIT = re.compile(r"(\d{8}-\d{2}:\d{2}:\d{2}\.\d{3}) .*Train step (\d+)/\d+ done\.")


def build_model(path: Path) -> None:
    """The demo's tokenizer and config, at a size whose steps take seconds."""
    import torch
    from transformers import AutoConfig, Qwen2ForCausalLM

    build_tiny_model(str(path))
    cfg = AutoConfig.from_pretrained(path)
    cfg.update(
        {
            "hidden_size": HIDDEN,
            "intermediate_size": 3 * HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HIDDEN // 64,
            "num_key_value_heads": HIDDEN // 128,
            "head_dim": 64,
            "layer_types": ["full_attention"] * LAYERS,
            "max_position_embeddings": 1024,
        }
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(path)


def write_long_prompts(path: Path, n: int) -> None:
    """The demo's arithmetic questions, each after ``CONTEXT`` words of context
    (digits and '+', words the demo's tokenizer has)."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for row in arithmetic_rows(n):
            context = " ".join(rng.choice([*DIGITS, "+"]) for _ in range(CONTEXT))
            message = row["messages"][0]
            message["content"] = f"{context} {message['content']}"
            f.write(json.dumps(row) + "\n")


def sglang_metadata(root: Path) -> Path:
    """A folder with an ``sglang`` distribution's metadata and no code.

    AReaL checks the sglang package's version before it builds even its SGLang
    client (``SGLangConfig.build_args``). With the recording on, areal-debug
    relaxes that check for its CPU server (modes/sglang_stand_in.py); with it
    off, areal-debug changes nothing, so AReaL would stop. Both runs get this
    folder on their path instead, as if on a GPU machine with sglang installed:
    the same AReaL code runs in both."""
    folder = root / "sglang-metadata"
    info = folder / "sglang-0.5.10.post1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.10.post1\n"
    )
    return folder


def step_seconds(log: Path) -> list[float]:
    """Each step's time after the first: between consecutive commits."""
    stamps = {
        int(m.group(2)): datetime.strptime(m.group(1), "%Y%m%d-%H:%M:%S.%f")
        for m in COMMIT.finditer(log.read_text(errors="replace"))
    }
    steps = sorted(stamps)
    if steps != list(range(1, len(steps) + 1)) or len(steps) < 2:
        raise SystemExit(f"{log}: AReaL committed steps {steps}")
    return [(stamps[n] - stamps[n - 1]).total_seconds() for n in steps[1:]]


class Runs:
    """Fresh work directories sharing one model and dataset."""

    def __init__(self, root: Path, steps: int):
        self.root, self.steps, self.count = root, steps, 0
        build_model(root / "model")
        write_long_prompts(root / "data.jsonl", 16 * (steps + 1))
        self.path = sglang_metadata(root)

    def dump(self, on: bool) -> tuple[Path, list[float]]:
        """A run with the recording on or off: its work directory, its steps' times."""
        self.count += 1
        wd = self.root / f"run{self.count}-{'on' if on else 'off'}"
        wd.mkdir()
        for name in ("model", "data.jsonl"):
            (wd / name).symlink_to(self.root / name)
        server, addr = start_server(wd, run_env(wd))
        try:
            overrides = [*SIZE, f"debug.dump_rollout_data={str(on).lower()}"]
            cmd = mode_command("dump", 1, self.steps, False, overrides)
            env = run_env(wd, server_addr=addr)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(self.path), env.get("PYTHONPATH")) if p
            )
            run_logged(wd, "dump", cmd, env)
        finally:
            end_process(server)
        return wd, step_seconds(wd / "dump.log")

    def replay(self, wd: Path) -> list[float]:
        """``wd``'s recording replayed as the demo replays it; its steps' times."""
        script = write_replay_script(wd, 1, self.steps, False, SIZE)
        run_logged(wd, "replay", ["bash", str(script)], script_env())
        return step_seconds(wd / "replay.log")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        runs = Runs(root, args.steps)
        pairs = repeat(
            lambda i: paired(i, lambda: runs.dump(False), lambda: runs.dump(True)),
            args.pairs,
            warmup=0,
        )
        last_on = pairs[-1][1]
        replayed = runs.replay(last_on[0])
    overheads = []
    for (_, off), (_, on) in pairs:
        overheads += [b / a - 1 for a, b in zip(off, on, strict=True)]
        print(
            f"# pair: off {statistics.mean(off):.2f} s a step, on "
            f"{statistics.mean(on):.2f} s ({len(on)} steps each, the first left out)"
        )
    diffs = [
        (statistics.mean(on) - statistics.mean(off)) * 1e3
        for (_, off), (_, on) in pairs
    ]
    print(f"# recording on costs {statistics.median(diffs):+.0f} ms a step (median)")
    emit(median_figure("recording_on_vs_off_step_time", overheads, "<=", 0.03))
    recorded = last_on[1]
    print(
        f"# replay {statistics.mean(replayed):.2f} s a step, recorded "
        f"{statistics.mean(recorded):.2f} s"
    )
    emit(
        pooled_figure(
            "replay_step_vs_recorded_step_time", replayed, recorded, "<=", 1.0
        )
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
