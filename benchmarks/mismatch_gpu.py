# SPDX-License-Identifier: Apache-2.0
"""The training-inference mismatch's cost on an accelerator, against a training
step of a model of a realistic shape (run on a lent GPU machine; not in make bench,
which runs where there is none).

A Qwen2-shaped causal LM (randomly initialised from a config: nothing is
downloaded), bf16 weights, a step of SEQUENCES x SEQLEN tokens: the recomputed
log-probs (no grad), then MINI_BATCHES mini-batches of forward, backward and
AdamW. The mismatch is what the probe does after the recomputed log-probs
(``areal_debug.stages.mismatch``: pair every token with the engine's log-prob of
it, seven statistics per token, and the copies AReaL's stats tracker keeps).
Both are timed inside the same step with the device synchronised; a warm-up step
is dropped; the figure is the median over the steps.

    python3 benchmarks/mismatch_gpu.py [--runs 5] [--layers 24] [--hidden 1024]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from figures import emit, exit_status, median_figure, repeat, skipped  # noqa: E402

from areal_debug.stages import mismatch  # noqa: E402

SEQUENCES, SEQLEN, MINI_BATCHES = 64, 2048, 4
TARGET = 0.005


def build(layers: int, hidden: int, seqlen: int, vocab: int, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 512),
        max_position_embeddings=seqlen,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)


def logp(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=151936, help="Qwen2's vocabulary")
    ap.add_argument("--sequences", type=int, default=SEQUENCES)
    ap.add_argument("--seqlen", type=int, default=SEQLEN)
    ap.add_argument(
        "--device", default="cuda", help="cpu only to try the script out, tiny"
    )
    args = ap.parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        emit(skipped("mismatch_metrics_vs_train_step[cuda]", "no CUDA device here"))
        return exit_status()
    sequences, seqlen = args.sequences, args.seqlen
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    model = build(args.layers, args.hidden, seqlen, args.vocab, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    vocab = model.config.vocab_size
    ids = torch.randint(4, vocab, (sequences, seqlen), device=device)
    width = seqlen - 1
    mask = torch.zeros(1, width, dtype=torch.int32, device=device)
    mask[:, width // 4 :] = 1
    engine = [
        {"logprobs": -torch.rand(1, width, device=device) * 3, "loss_mask": mask}
        for _ in range(sequences)
    ]
    per_mb = sequences // MINI_BATCHES

    def step(_):
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            old = torch.cat(
                [logp(model, ids[i : i + 8]) for i in range(0, sequences, 8)]
            )
        sync()
        t1 = time.perf_counter()
        d, m = mismatch.token_deltas(engine, list(old[:, None]))
        kept = [t.clone() for t in mismatch.token_stats(d, m).values()]
        # The per-token log-probs and tokens a dump keeps (debug.record_trainer_logp).
        kept += [old.to("cpu", copy=True), ids.to(torch.int32).to("cpu", copy=True)]
        sync()
        t2 = time.perf_counter()
        for mb in range(MINI_BATCHES):
            for i in range(mb * per_mb, (mb + 1) * per_mb, 4):
                new = logp(model, ids[i : i + 4])
                loss = -(torch.exp(new - old[i : i + 4]) * 0.1).mean()
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync()
        t3 = time.perf_counter()
        assert kept
        return (t1 - t0) + (t3 - t2), t2 - t1

    pairs = repeat(step, args.runs)
    params = sum(p.numel() for p in model.parameters())
    train = statistics.median(t for t, _ in pairs)
    cost = statistics.median(c for _, c in pairs)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(
        f"# {name}: Qwen2-shaped LM, {params / 1e6:.0f}M "
        f"params, bf16, {sequences} x {seqlen} tokens a step, {MINI_BATCHES} "
        f"mini-batches: training {train * 1e3:.0f} ms, mismatch {cost * 1e3:.2f} ms "
        "(medians; timed inside the same step, device synchronised)"
    )
    emit(
        median_figure(
            f"mismatch_metrics_vs_train_step[{device},{params / 1e6:.0f}M,"
            f"{sequences * seqlen}_tokens]",
            [c / t for t, c in pairs],
            "<=",
            TARGET,
        )
    )
    return exit_status()


if __name__ == "__main__":
    raise SystemExit(main())
