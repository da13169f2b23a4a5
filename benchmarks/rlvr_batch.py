# SPDX-License-Identifier: Apache-2.0
"""A realistically padded RLVR rollout batch, as AReaL's RLVR workflow returns it.

One dict per prompt, its ``group`` samples right-padded with zeros to the group's
longest sequence (``areal.utils.data.concat_padded_tensors``); prompts of 64-512
tokens, heavy-tailed (log-normal) response lengths up to ``max_new_tokens``, token
ids over Qwen2's 151,936-token vocabulary, and the dtypes AReaL 1.0.4 and 2.0's
``RLVRWorkflow`` builds (``areal/workflow/rlvr.py``): int32 ``input_ids``,
``loss_mask`` and ``versions``, float32 ``logprobs`` and ``rewards``, a bool
``attention_mask``.

Token ids are drawn uniformly, with none of the redundancy of real text: the
compression figures measured on this batch are on the pessimistic side for the
ids. The log-probs are those of sampled tokens (``sampled_logprobs``).
"""

from __future__ import annotations

import numpy as np
import torch


def sampled_logprobs(rs: np.random.Generator, n: int) -> np.ndarray:
    """``n`` log-probs of tokens sampled at temperature 1, as an inference engine
    reports them (float32): most tokens of a reasoning response are near-certain
    (log-prob within a few hundredths of 0), a minority of about a fifth are real
    choices, with a long tail of negative values (the 80/20 split of token
    entropies measured in "Beyond the 80/20 Rule: High-Entropy Minority Tokens
    Drive Effective RL for LLM Reasoning", Wang et al. 2025). Mean about -0.3
    nats a token, floored at -30 (float32 probabilities below 1e-13 are not
    sampled)."""
    choice = rs.random(n) < 0.2
    lp = np.where(choice, -rs.exponential(1.5, n), -rs.exponential(0.01, n))
    return np.maximum(lp, -30.0).astype(np.float32)


def padded_rlvr_batch(
    prompts: int = 128,
    group: int = 4,
    *,
    vocab: int = 151_936,
    max_new_tokens: int = 1536,
    seed: int = 0,
) -> list[dict[str, torch.Tensor]]:
    """``prompts x group`` sequences of at most 512 + ``max_new_tokens`` tokens
    (the default: 512 sequences of at most 2048)."""
    rs = np.random.default_rng(seed)
    batch = []
    for _ in range(prompts):
        prompt = int(rs.integers(64, 513))
        # Median ~550 tokens, a long tail up to the cap (reasoning responses).
        resp = np.minimum(
            rs.lognormal(6.3, 0.9, group).astype(np.int64) + 1, max_new_tokens
        )
        length = prompt + int(resp.max())
        ids = torch.from_numpy(rs.integers(0, vocab, (group, length), dtype=np.int32))
        ids[:, :prompt] = ids[0, :prompt]  # one prompt per group
        attention = torch.zeros(group, length, dtype=torch.bool)
        loss_mask = torch.zeros(group, length, dtype=torch.int32)
        logprobs = torch.zeros(group, length, dtype=torch.float32)
        versions = torch.zeros(group, length, dtype=torch.int32)
        for row, r in enumerate(resp.tolist()):
            end = prompt + r
            ids[row, end:] = 0
            attention[row, :end] = True
            loss_mask[row, prompt:end] = 1
            logprobs[row, prompt:end] = torch.from_numpy(sampled_logprobs(rs, r))
            versions[row, :prompt] = -1  # the prompt's tokens were not generated
            versions[row, prompt:end] = 12
        batch.append(
            {
                "input_ids": ids,
                "attention_mask": attention,
                "loss_mask": loss_mask,
                "logprobs": logprobs,
                "versions": versions,
                "rewards": torch.from_numpy(
                    rs.integers(0, 2, group).astype(np.float32)
                ),
            }
        )
    return batch
