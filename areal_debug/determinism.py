# SPDX-License-Identifier: Apache-2.0
"""Deterministic-execution settings: applied by the launcher and the trainer,
recorded in the manifest, and compared when a recording is replayed."""

from __future__ import annotations

import os
from typing import Any

import torch

# The settings the ROLL rollout-mock guide lists for bitwise GPU runs.
DETERMINISM_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
}


def enable_determinism() -> None:
    """Deterministic kernels, as the dump/replay comparison needs on GPUs."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def current_settings() -> dict[str, Any]:
    """What this process runs with, as plain JSON values."""
    settings: dict[str, Any] = {k: os.environ.get(k) for k in DETERMINISM_ENV}
    settings["torch_deterministic_algorithms"] = (
        torch.are_deterministic_algorithms_enabled()
    )
    settings["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    settings["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    return settings


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'key: recorded X, replay Y' for each setting that differs."""
    return [
        f"{k}: recorded {recorded.get(k)!r}, replay {current.get(k)!r}"
        for k in sorted(set(recorded) | set(current))
        if recorded.get(k) != current.get(k)
    ]
