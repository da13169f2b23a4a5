# SPDX-License-Identifier: Apache-2.0
"""What a debug run does at each trainer hook: off, dump or replay, chosen once."""

from __future__ import annotations

from areal_debug.config import DebugConfig
from areal_debug.modes.base import DebugMode


def choose_mode(trainer, debug: DebugConfig) -> DebugMode:
    """Off when both flags are off; dump or replay with this run's topology."""
    if not debug.enabled:
        return DebugMode(trainer, debug)
    from areal_debug.modes.topology import choose_topology

    if debug.replay_rollout_data:
        from areal_debug.modes.replay import ReplayMode

        return ReplayMode(trainer, debug, choose_topology())
    from areal_debug.modes.dump import DumpMode

    return DumpMode(trainer, debug, choose_topology())


__all__ = ["DebugMode", "choose_mode"]
