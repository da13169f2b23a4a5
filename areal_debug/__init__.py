# SPDX-License-Identifier: Apache-2.0
"""areal-debug: record AReaL rollout batches, replay training steps bit for bit."""

from __future__ import annotations

import importlib

# Name -> module. Loaded on first use: AReaL's config module takes seconds to
# import and its trainer ~8 s, which light users (the CLI, areal_debug.testing)
# never need.
_EXPORTS = {
    "DebugConfig": "areal_debug.config",
    "DebugGRPOConfig": "areal_debug.config",
    "DebugPPOConfig": "areal_debug.config",
    "DebugSection": "areal_debug.config",
    "debug_config_of": "areal_debug.config",
    "load_expr_config": "areal_debug.config",
    "DebugPPOTrainer": "areal_debug.trainer",
    "ReplayDataLoader": "areal_debug.modes.replay_loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'areal_debug' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
