# SPDX-License-Identifier: Apache-2.0
"""wandb: an import-only stand-in for the GPU check (benchmarks/gpu_check/run.sh).

Not the real Weights & Biases client. AReaL 1.0.4's StatsLogger
(areal/utils/stats_logger.py) imports wandb at module level and always calls
``wandb.init(mode=...)``, ``wandb.log`` and ``wandb.finish``, even with
``stats_logger.wandb.mode: disabled`` (the demo's and areal-debug's configs), where
the real client does nothing. This stand-in does the same nothing in that mode only:
``init`` with any other mode, ``login`` and every other name raise an error naming
this stand-in (``_gpu_check_standin.StandInError`` or AttributeError).
"""

from __future__ import annotations

from _gpu_check_standin import disabled_tracker, module_getattr, refuse

login = refuse("wandb", "login")
init, log, finish = disabled_tracker("wandb")
__getattr__ = module_getattr("wandb")
