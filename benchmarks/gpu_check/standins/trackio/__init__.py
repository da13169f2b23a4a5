# SPDX-License-Identifier: Apache-2.0
"""trackio: an import-only stand-in for the GPU check (benchmarks/gpu_check/run.sh).

Not the real Trackio. AReaL 1.0.4's StatsLogger (areal/utils/stats_logger.py)
imports trackio at module level and calls it only with ``stats_logger.trackio.mode``
other than ``disabled`` (AReaL's default). Every name raises an error naming this
stand-in (``_gpu_check_standin.StandInError``): ``init``, ``log`` and ``finish``,
the names AReaL calls, and AttributeError for the rest.
"""

from __future__ import annotations

from _gpu_check_standin import module_getattr, refuse

init = refuse("trackio", "init")
log = refuse("trackio", "log")
finish = refuse("trackio", "finish")

__getattr__ = module_getattr("trackio")
