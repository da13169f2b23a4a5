# SPDX-License-Identifier: Apache-2.0
"""swanlab: an import-only stand-in for the GPU check (benchmarks/gpu_check/run.sh).

Not the real SwanLab client. AReaL 1.0.4's StatsLogger (areal/utils/stats_logger.py)
imports swanlab at module level and always calls ``swanlab.init(mode=...)``,
``swanlab.log`` and ``swanlab.finish``, even with ``stats_logger.swanlab.mode:
disabled`` (AReaL's default), where the real client does nothing. This stand-in does
the same nothing in that mode only: ``init`` with any other mode, ``login`` and
every other name raise an error naming this stand-in
(``_gpu_check_standin.StandInError`` or AttributeError).
"""

from __future__ import annotations

from _gpu_check_standin import disabled_tracker, module_getattr, refuse

login = refuse("swanlab", "login")
init, log, finish = disabled_tracker("swanlab")
__getattr__ = module_getattr("swanlab")
