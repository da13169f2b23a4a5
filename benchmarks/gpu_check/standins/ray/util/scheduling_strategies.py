# SPDX-License-Identifier: Apache-2.0
"""ray.util.scheduling_strategies: part of the import-only ray stand-in for the GPU
check (benchmarks/gpu_check/standins/ray). The strategy class can be imported, not
made."""

from _gpu_check_standin import StandInError, message, module_getattr


class PlacementGroupSchedulingStrategy:
    def __init__(self, *args, **kwargs):
        raise StandInError(
            message(
                "ray.util.scheduling_strategies", "PlacementGroupSchedulingStrategy"
            )
        )


__getattr__ = module_getattr("ray.util.scheduling_strategies")
