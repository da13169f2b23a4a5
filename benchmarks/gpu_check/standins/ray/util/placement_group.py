# SPDX-License-Identifier: Apache-2.0
"""ray.util.placement_group: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins/ray). ``PlacementGroup`` is a name for signatures;
making or removing one raises an error naming the stand-in."""

from _gpu_check_standin import StandInError, message, module_getattr, refuse


class PlacementGroup:
    def __init__(self, *args, **kwargs):
        raise StandInError(message("ray.util.placement_group", "PlacementGroup"))


placement_group = refuse("ray.util.placement_group", "placement_group")
remove_placement_group = refuse("ray.util.placement_group", "remove_placement_group")

__getattr__ = module_getattr("ray.util.placement_group")
