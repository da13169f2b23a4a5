# SPDX-License-Identifier: Apache-2.0
"""ray.runtime_env: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins/ray). ``RuntimeEnv`` can be imported, not made."""

from _gpu_check_standin import StandInError, message, module_getattr


class RuntimeEnv(dict):
    def __init__(self, *args, **kwargs):
        raise StandInError(message("ray.runtime_env", "RuntimeEnv"))


__getattr__ = module_getattr("ray.runtime_env")
