# SPDX-License-Identifier: Apache-2.0
"""A realistically padded RLVR rollout batch, as AReaL's RLVR workflow returns it.

One dict per prompt, its ``group`` samples right-padded to the group's longest
sequence; prompts of 64-512 tokens, heavy-tailed (log-normal) response lengths up to
``max_new_tokens``, token ids over a ~150k vocabulary, the dtypes AReaL uses
(int64 ids, masks and versions, float32 log-probs, bool attention mask).

Token ids are drawn uniformly, with none of the redundancy of real text, and the
log-probs are those of uniformly drawn probabilities: compression figures measured
on this batch are on the pessimistic side.
"""

from __future__ import annotations

import numpy as np
import torch


def padded_rlvr_batch(
    prompts: int = 64,
    group: int = 8,
    *,
    vocab: int = 151_936,
    max_new_tokens: int = 8192,
    seed: int = 0,
) -> list[dict[str, torch.Tensor]]:
    rs = np.random.default_rng(seed)
    batch = []
    for _ in range(prompts):
        prompt = int(rs.integers(64, 513))
        # Median ~550 tokens, a long tail up to the cap (reasoning responses).
        resp = np.minimum(
            rs.lognormal(6.3, 0.9, group).astype(np.int64) + 1, max_new_tokens
        )
        length = prompt + int(resp.max())
        ids = torch.from_numpy(rs.integers(0, vocab, (group, length)))
        ids[:, :prompt] = ids[0, :prompt]  # one prompt per group
        attention = torch.zeros(group, length, dtype=torch.bool)
        loss_mask = torch.zeros(group, length, dtype=torch.int64)
        logprobs = torch.zeros(group, length, dtype=torch.float32)
        versions = torch.full((group, length), -1, dtype=torch.int64)
        for row, r in enumerate(resp.tolist()):
            end = prompt + r
            ids[row, end:] = 0
            attention[row, :end] = True
            loss_mask[row, prompt:end] = 1
            logprobs[row, prompt:end] = torch.from_numpy(
                np.log(rs.uniform(1e-6, 1.0, r)).astype(np.float32)
            )
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
