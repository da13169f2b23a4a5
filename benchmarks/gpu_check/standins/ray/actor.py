# SPDX-License-Identifier: Apache-2.0
"""ray.actor: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins/ray). ``ActorHandle`` is a name for AReaL's dataclass
annotations (areal/infra/scheduler/ray.py); there is never an actor to handle."""

from _gpu_check_standin import StandInError, message, module_getattr


class ActorHandle:
    def __init__(self, *args, **kwargs):
        raise StandInError(message("ray.actor", "ActorHandle"))


__getattr__ = module_getattr("ray.actor")
