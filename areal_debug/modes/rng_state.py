# SPDX-License-Identifier: Apache-2.0
"""Random-number-generator states as plain values: captured at the dump point of each
step on every rank, restored at the same point in replay.

The dump run's rollout side draws random numbers (dataloader shuffling, worker
seeds) that a replay never draws, so without this the training side would start
each step from a different RNG state and anything random in training (dropout)
would differ.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture() -> dict[str, Any]:
    """This process's RNG states as plain Python values (ints, strs, lists).

    Plain values gather across ranks with all_gather_object and load back with
    torch.load(weights_only=True).
    """
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def _tuples(value):
    # torch.save keeps tuples, but random.setstate insists on tuples all the way down.
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    return value


def _bytes(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)


def restore(state: dict[str, Any]) -> None:
    random.setstate(_tuples(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(
        (
            name,
            np.asarray(keys, dtype=np.uint32),
            int(pos),
            int(has_gauss),
            float(cached),
        )
    )
    torch.set_rng_state(_bytes(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_bytes(s) for s in state["cuda"]])
