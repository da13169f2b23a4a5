# SPDX-License-Identifier: Apache-2.0
"""Stage digests and the training-inference mismatch: what do they cost per step,
measured, and (the digests) extrapolated to 7B?

Measured (the figure): a PPO step of the demo's tiny Qwen2 on CPU at a realistic
RL step, 64 sequences x 1024 tokens (16 prompts x 4 samples; 65536 tokens), the
demo's 2 mini-batches, Adam. The step is what the demo's
``timeperf/`` entries time: recompute the log-probs, compute advantages and
returns, then per mini-batch a forward and backward pass, gradient clipping and the
optimizer step. The digests are areal-debug's own (``StageLog``, what the stage
probes call), taken where the probes take them: the log-probs and advantages per
trajectory, each micro-batch's loss, per mini-batch the gradients before clipping
and the weights after the optimizer step, then the step's one transfer to the
host. Digests and training are timed inside the same step (the pair), a warm-up
step is dropped, and the figure is the median over the steps of digest time over
training time.

With ``--workdir DIR --reuse`` the CPU demo's dump run already in DIR (a real GRPO
run through AReaL's PPOTrainer; each rank's ``stages.json`` holds
``digest_seconds``) is shown too, as context: it trains a few hundred tokens a
step, so there the digests' share is larger (training ~ params x tokens, digests ~
params).

Extrapolated (context, not a figure): digests are memory-bound reads (no matmuls),
training is FLOP-bound, so the arithmetic for a 7B model on one accelerator is
printed with every assumption next to it.

    .venv/bin/python benchmarks/stage_digest_cost.py [--runs 5] [--workdir DIR [--reuse]]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_run import add_demo_arguments, run_demo  # noqa: E402
from figures import (  # noqa: E402
    deciding_figure,
    emit,
    exit_status,
    median_figure,
    repeat,
)
from gpu_step import layer_digested  # noqa: E402

from areal_debug.recording.format import STAGES_FILE, STATS  # noqa: E402
from areal_debug.stages import mismatch  # noqa: E402
from areal_debug.stages.names import mini_batch_name, trajectory_name  # noqa: E402
from areal_debug.stages.stage_log import StageLog  # noqa: E402
from areal_debug.tooling.tiny_task import build_tiny_model  # noqa: E402

TRAIN_TIMINGS = (
    "timeperf/recompute_logp",
    "timeperf/ref_logp",
    "timeperf/critic_values",
    "timeperf/compute_advantage",
    "timeperf/train_step",
)
TARGET = 0.01
MISMATCH_TARGET = 0.005
# debug.layer_digests on by default in dump runs if it costs at most this of a
# CPU step (and 0.01 of a GPU step, benchmarks/gpu_step.py): issue 59.
LAYERS_TARGET = 0.03

# The measured step: the tiny model at a realistic batch for it.
# 16 prompts x 4 samples of 1024 tokens: a small RL step (the shipped GSM8K config,
# configs/gsm8k_grpo_debug.yaml, trains 256 prompts x 4 samples of up to 1024 new
# tokens).
SEQUENCES = 64
SEQLEN = 1024
TINY_MINI_BATCHES = 2  # configs/tiny_cpu.yaml: actor.ppo_n_minibatches

# The 7B extrapolation's assumptions (one H100 SXM, bf16 weights, fp32 grads).
PARAMS_7B = 7.0e9
TOKENS_PER_STEP = 512 * 2048  # the batch: 512 sequences x 2048 tokens
HBM_BYTES_PER_S = 3.35e12
PEAK_FLOPS = 989e12
MFU = 0.40
MINI_BATCHES = 4  # per mini-batch: one gradient digest, one weight digest
# Bytes moved per digested element by an accelerator's row sums
# (areal_debug/stages/digest.py): read the value and write it into its block (up
# to 4 + 4 B for fp32 gradients), write and read the block's float64 copy (16 B).
# On an H200 the launches and one slow scan, not the bytes, were what cost
# (docs/benchmarks.md).
BYTES_PER_ELEMENT = 24


class TinyStep:
    """One PPO step of the tiny model on a fixed batch, digested or not."""

    def __init__(self, model_dir: str, seed: int = 0):
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(
            build_tiny_model(model_dir),
            torch_dtype=torch.float32,
            attn_implementation="sdpa",
        )
        self.model.train()
        vocab = self.model.config.vocab_size
        self.ids = torch.randint(4, vocab, (SEQUENCES, SEQLEN))
        self.rewards = torch.rand(SEQUENCES)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        # The engine's side: a log-prob per token (position t: token t), the
        # last token's past the trainer's row; the loss on the completion half.
        width = SEQLEN - 1
        mask = torch.zeros(1, width, dtype=torch.int32)
        mask[:, width // 2 :] = 1
        self.trajectories = [
            {"logprobs": -torch.rand(1, width) * 3, "loss_mask": mask}
            for _ in range(SEQUENCES)
        ]
        self.params = list(self.model.named_parameters())

    def _logp(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=ids).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    def run(self) -> tuple[float, float, float]:
        """(training seconds, digest seconds, mismatch seconds) of one step,
        digested where the stage probes digest, the mismatch measured where the
        probe measures it (after the recomputed log-probs)."""
        log = StageLog()
        t0 = time.perf_counter()
        out: list[torch.Tensor] = []
        with torch.no_grad():  # recompute_logp, its layers digested
            layers_s = layer_digested(
                self.model,
                StageLog(),
                self.ids,
                lambda: None,
                lambda: out.append(self._logp(self.ids)),
            )
        old = out[0]
        t1 = time.perf_counter()
        measured = self._mismatch(old)
        mismatch_s = time.perf_counter() - t1
        log.add_many("logp", [(trajectory_name(i), t, 0) for i, t in enumerate(old)])
        adv = (self.rewards - self.rewards.mean()) / (self.rewards.std() + 1e-6)
        advantages = adv[:, None].expand_as(old).contiguous()
        returns = advantages.clone()
        log.add_many(
            "advantages",
            [
                (f"{trajectory_name(i)} {key}", t[i], 0)
                for i in range(SEQUENCES)
                for key, t in (("advantages", advantages), ("returns", returns))
            ],
        )
        per_mb = SEQUENCES // TINY_MINI_BATCHES
        for mb in range(TINY_MINI_BATCHES):
            rows = slice(mb * per_mb, (mb + 1) * per_mb)
            logp = self._logp(self.ids[rows])
            ratio = torch.exp(logp - old[rows])
            a = advantages[rows]
            loss = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a).mean()
            log.add("loss", mini_batch_name(mb, "micro-batch 0"), loss, value=True)
            loss.backward()
            grads = [(mini_batch_name(mb, n), p.grad, 0) for n, p in self.params]
            log.add_many("grads", grads, norm=True)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            log.add_many(
                "weights", [(mini_batch_name(mb, n), p, 0) for n, p in self.params]
            )
        log.to_host()
        wall = time.perf_counter() - t0
        assert measured > 0
        self.layers_s = layers_s
        return wall - log.seconds - mismatch_s - layers_s, log.seconds, mismatch_s

    def _mismatch(self, trainer: torch.Tensor) -> int:
        """What the probe does with one compute_logp call: pair each token with
        the engine's log-prob of it, every statistic per token, the copies
        AReaL's stats tracker keeps of them (stats_tracker.stat clones), and the
        per-token log-probs kept for the recording with each row's tokens
        (debug.record_trainer_logp: StageLog keeps a host copy of each, int32
        tokens). Compressing and writing them is the writer's, off the step."""
        d, mask = mismatch.token_deltas(self.trajectories, list(trainer[:, None]))
        kept = [t.clone() for t in mismatch.token_stats(d, mask).values()]
        for i, row in enumerate(trainer):
            kept.append(row.detach().to("cpu", copy=True))
            kept.append(self.ids[i].to(torch.int32).to("cpu", copy=True))
        return int(mask.sum()) + len(kept)


def demo_steps(workdir: Path) -> list[tuple[int, float, float, bool]]:
    """(step, seconds digesting on the slowest rank, training seconds, whether
    its layers were digested) per step of the demo's dump run in ``workdir``."""
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
        layers = any("layers" in r for r in stages["ranks"])
        out.append(
            (stages["global_step"], max(stages["digest_seconds"]), train, layers)
        )
    return out


def extrapolate_7b() -> tuple[float, list[str]]:
    step_flops = 8 * PARAMS_7B * TOKENS_PER_STEP  # recompute fwd 2NT + train 6NT
    step_s = step_flops / (PEAK_FLOPS * MFU)
    # A gradient and a weight digest of every parameter per mini-batch.
    elements = PARAMS_7B * 2 * MINI_BATCHES
    digest_s = elements * BYTES_PER_ELEMENT / HBM_BYTES_PER_S
    lines = [
        f"# 7B step: 8 x {PARAMS_7B:.0e} params x {TOKENS_PER_STEP} tokens = "
        f"{step_flops:.3g} FLOP at {MFU:.0%} of {PEAK_FLOPS:.3g} FLOP/s = {step_s:.1f} s",
        f"# 7B digests: {PARAMS_7B:.0e} params x 2 (gradients, weights) x "
        f"{MINI_BATCHES} mini-batches x {BYTES_PER_ELEMENT} B / "
        f"{HBM_BYTES_PER_S:.3g} B/s = {digest_s * 1e3:.0f} ms (per-token stages: "
        f"{TOKENS_PER_STEP} tokens x a few tensors, negligible)",
    ]
    return digest_s / step_s, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--runs", type=int, default=5, help="measured steps (after a warm-up)"
    )
    add_demo_arguments(ap, "demo steps (with --workdir)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        step = TinyStep(os.path.join(tmp, "model"))

        def measure(_):
            train, digest, measured = step.run()
            return train, digest, measured, step.layers_s

        pairs = repeat(measure, args.runs)
        demo = []
        if args.workdir:
            workdir = Path(args.workdir)
            if not args.reuse:
                run_demo(workdir, args.steps)
            demo = demo_steps(workdir)
    params = sum(p.numel() for _, p in step.params)
    train = statistics.median(t for t, *_ in pairs)
    digest = statistics.median(d for _, d, *_ in pairs)
    measured = statistics.median(m for _, _, m, _ in pairs)
    layers = statistics.median(la for *_, la in pairs)
    print(
        f"# tiny Qwen2 ({params} params), {SEQUENCES} x {SEQLEN} = "
        f"{SEQUENCES * SEQLEN} tokens a step, {TINY_MINI_BATCHES} mini-batches, "
        f"1 CPU thread: training {train * 1e3:.0f} ms, digests {digest * 1e3:.2f} ms "
        "(medians; digests and training timed inside the same step)"
    )
    for s, d, t, with_layers in demo:
        print(
            f"# demo step {s} (AReaL's PPOTrainer, a few hundred tokens): digests "
            f"{d * 1e3:.2f} ms of {t * 1e3:.0f} ms training ({d / t:.3f}; the "
            "digests are per parameter, training per token"
            + ("; its layers digested too" if with_layers else "")
            + ")"
        )
    emit(
        median_figure(
            f"stage_digests_vs_train_step_tiny_cpu_{SEQUENCES * SEQLEN}_tokens",
            [d / t for t, d, *_ in pairs],
            "<=",
            TARGET,
        )
    )
    print(
        f"# training-inference mismatch: {measured * 1e3:.2f} ms a step over "
        f"{SEQUENCES * (SEQLEN - 1) // 2} loss tokens (7 statistics per token, "
        "the stats tracker's copies, and the per-token log-probs and tokens kept)"
    )
    emit(
        median_figure(
            f"mismatch_metrics_vs_train_step_tiny_cpu_{SEQUENCES * SEQLEN}_tokens",
            [m / t for t, _, m, _ in pairs],
            "<=",
            MISMATCH_TARGET,
        )
    )
    print(
        f"# layer digests (debug.layer_digests): {layers * 1e3:.2f} ms a step, in "
        "the recomputed log-probs' pass: each layer's 2 norms, attention, MLP and "
        "output, the final norm and the logits, per sequence"
    )
    # Not a target to meet: the figure that decides debug.layer_digests' default
    # (every step where it is cheap enough, else the pinned steps only).
    emit(
        deciding_figure(
            f"layer_digests_vs_train_step_tiny_cpu_{SEQUENCES * SEQLEN}_tokens",
            [la / t for t, *_, la in pairs],
            "<=",
            LAYERS_TARGET,
            "debug.layer_digests' default",
            "true",
            "pinned",
        )
    )
    ratio, lines = extrapolate_7b()
    for line in lines:
        print(line)
    print(f"# 7B extrapolated: digests {ratio:.4f} of the training step (information)")
    return exit_status()


if __name__ == "__main__":
    raise SystemExit(main())
