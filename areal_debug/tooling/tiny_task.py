# SPDX-License-Identifier: Apache-2.0
"""A tiny verifiable task that runs on CPU: a small Qwen2 model built offline,
a word-level tokenizer, single-digit arithmetic prompts and a partial-credit reward.

Nothing is downloaded. The model does not need to learn; its sampled answers
vary, and partial credit makes rewards differ inside each GRPO group so that
advantages and gradients are non-zero.
"""

from __future__ import annotations

import json
import os
import random

DIGITS = [str(i) for i in range(19)]
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>"]
WORDS = (
    SPECIAL + DIGITS + ["+", "=", "?", "what", "is", "answer", "user:", "assistant:"]
)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def word_level_tokenizer(words: list[str]):
    """A Hugging Face tokenizer with one token per word of ``words`` (split on
    white space), ``SPECIAL`` among them."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<eos>",
        pad_token="<pad>",
        bos_token="<bos>",
        unk_token="<unk>",
    )


def build_tiny_model(path: str, seed: int = 0, dropout: float = 0.0) -> str:
    """Create (once) a tiny Qwen2 causal LM and tokenizer in ``path``.

    ``dropout`` sets the attention dropout, for tests of training-side randomness.
    """
    if os.path.exists(os.path.join(path, "config.json")) and os.path.exists(
        os.path.join(path, "tokenizer.json")
    ):
        return path
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    os.makedirs(path, exist_ok=True)
    vocab = {w: i for i, w in enumerate(WORDS)}
    fast = word_level_tokenizer(WORDS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    cfg = Qwen2Config(
        vocab_size=len(WORDS),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=vocab["<bos>"],
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
        tie_word_embeddings=False,
        attention_dropout=dropout,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return path


def arithmetic_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append(
            {
                "messages": [{"role": "user", "content": f"what is {a} + {b} ?"}],
                "answer": str(a + b),
            }
        )
    return rows


def write_dataset(path: str, n: int = 64, seed: int = 0) -> str:
    """Write the arithmetic prompts as JSONL (one row per prompt)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        for row in arithmetic_rows(n, seed):
            f.write(json.dumps(row) + "\n")
    return path


def load_dataset(path: str):
    """The JSONL prompts as a ``datasets.Dataset`` with ``messages`` and ``answer``."""
    from datasets import Dataset

    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return Dataset.from_list(rows)


def arithmetic_reward(
    prompt, completions, prompt_ids, completion_ids, answer, **kwargs
) -> float:
    """1 for the exact sum, partial credit for being close, 0 otherwise."""
    words = str(completions).replace("<eos>", " ").split()
    numbers = [w for w in words if w.isdigit()]
    if not numbers:
        return 0.0
    guess, target = int(numbers[0]), int(answer)
    return max(0.0, 1.0 - abs(guess - target) / 10.0)
