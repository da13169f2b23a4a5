# SPDX-License-Identifier: Apache-2.0
"""areal-debug: record AReaL rollout batches, replay training steps bit for bit."""

from areal_debug.config import (
    DebugConfig,
    DebugGRPOConfig,
    DebugPPOConfig,
    load_expr_config,
)
from areal_debug.replay_loader import ReplayDataLoader

__all__ = [
    "DebugConfig",
    "DebugGRPOConfig",
    "DebugPPOConfig",
    "DebugPPOTrainer",
    "ReplayDataLoader",
    "load_expr_config",
]


def __getattr__(name: str):
    # The trainer imports all of AReaL's engines (~8 s); load it only when asked.
    if name == "DebugPPOTrainer":
        from areal_debug.trainer import DebugPPOTrainer

        return DebugPPOTrainer
    raise AttributeError(f"module 'areal_debug' has no attribute {name!r}")
