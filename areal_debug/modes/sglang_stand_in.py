# SPDX-License-Identifier: Apache-2.0
"""When a CPU server speaking SGLang's HTTP protocol stands in for SGLang.

AReaL 1.0.4 checks the ``sglang`` package's version before building even its
SGLang *client* (``SGLangConfig.build_args``), and that package exists only for
GPUs. ``AREAL_DEBUG_CPU_SERVER=1`` (set by the demo) relaxes exactly that check
while the trainer runs; AReaL's client code runs unchanged.
"""

from __future__ import annotations

import importlib.util
import os

from areal_debug.areal_compat import SglangGuard
from areal_debug.logs import get_logger

logger = get_logger("DebugSglangStandIn")

CPU_SERVER_ENV = "AREAL_DEBUG_CPU_SERVER"


def missing_sglang_error() -> RuntimeError:
    """What to do when AReaL stopped on a missing ``sglang`` package: AReaL
    1.0.4 fails inside ``SGLangConfig.build_args`` with ``PackageNotFoundError:
    sglang``, which says nothing about the way out."""
    return RuntimeError(
        "The rollout backend is sglang, but the sglang package is not installed: "
        "AReaL 1.0.4 checks its version before building even the SGLang client "
        "(SGLangConfig.build_args). On a GPU machine, install sglang. If "
        "areal-debug's CPU server (or another server speaking SGLang's HTTP API) "
        f"stands in, set {CPU_SERVER_ENV}=1 and point AREAL_LLM_SERVER_ADDRS at "
        "it (AReaL's SPMD launchers set the address themselves; in "
        "single-controller mode set it in the controller's environment)."
    )


def stand_in_requested() -> bool:
    """``AREAL_DEBUG_CPU_SERVER=1`` and no sglang package installed."""
    return os.environ.get(CPU_SERVER_ENV) == "1" and not importlib.util.find_spec(
        "sglang"
    )


def relax_sglang_check() -> SglangGuard | None:
    """If a stand-in was requested: AReaL's sglang version check answers yes
    until the returned guard's ``restore()`` (the trainer's close). None otherwise."""
    if not stand_in_requested():
        return None
    guard = SglangGuard()
    guard.relax()
    logger.info(
        f"{CPU_SERVER_ENV}=1 and sglang is not installed: the CPU server stands in "
        "for SGLang, so AReaL's sglang version guard for server arguments is relaxed."
    )
    return guard
