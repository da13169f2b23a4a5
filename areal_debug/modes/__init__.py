# SPDX-License-Identifier: Apache-2.0
"""What a debug run does at each trainer hook: off, dump or replay, chosen once.

Importing the package loads nothing of AReaL: its leaf modules (``rng_state``)
serve processes that never load AReaL, such as the reliability suite's runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from areal_debug.config import DebugConfig
    from areal_debug.modes.base import DebugMode


def choose_mode(trainer, debug: DebugConfig) -> DebugMode:
    """Off when both flags are off; dump or replay with this run's topology."""
    from areal_debug.modes.base import DebugMode

    if not debug.enabled:
        return DebugMode(trainer, debug)
    from areal_debug.modes.topology import choose_topology

    if debug.replay_rollout_data:
        from areal_debug.modes.replay import ReplayMode

        return ReplayMode(trainer, debug, choose_topology())
    from areal_debug.modes.dump import DumpMode

    return DumpMode(trainer, debug, choose_topology())


def __getattr__(name: str) -> Any:
    if name == "DebugMode":
        from areal_debug.modes.base import DebugMode

        return DebugMode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DebugMode", "choose_mode"]
