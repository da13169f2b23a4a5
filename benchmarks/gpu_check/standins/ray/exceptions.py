# SPDX-License-Identifier: Apache-2.0
"""ray.exceptions: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins/ray). The exception classes AReaL's Ray launcher and
scheduler name in ``except`` clauses; nothing here ever raises them."""

from _gpu_check_standin import module_getattr


class RayError(Exception):
    pass


class GetTimeoutError(RayError, TimeoutError):
    pass


class RayActorError(RayError):
    pass


class RayTaskError(RayError):
    pass


__getattr__ = module_getattr("ray.exceptions")
