# SPDX-License-Identifier: Apache-2.0
"""ray.util: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins/ray); only its placement_group and
scheduling_strategies submodules, which AReaL imports from."""

from _gpu_check_standin import module_getattr

__getattr__ = module_getattr("ray.util")
