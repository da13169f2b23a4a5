# SPDX-License-Identifier: Apache-2.0
"""ray: an import-only stand-in for the GPU check (benchmarks/gpu_check/run.sh).

Not the real Ray. ``import areal`` (1.0.4) imports ray, ray.exceptions,
ray.runtime_env, ray.util.placement_group and ray.util.scheduling_strategies at module
level (its Ray launcher and scheduler, areal/utils/name_resolve.py,
areal/infra/remote_inf_engine.py, areal/infra/rpc/) and decorates two classes with
``@ray.remote``; on the local single-node path it only asks ``ray.is_initialized()``,
which is False here as in any process that never started Ray. The submodules hold
the classes AReaL names in signatures and ``except`` clauses. Starting an actor,
``ray.init``, ``ray.get``, making a placement group or runtime env, or any other
name raises an error naming this stand-in (``_gpu_check_standin.StandInError`` or
AttributeError).
"""

from __future__ import annotations

from _gpu_check_standin import StandInError, message, module_getattr


class _ActorClass:
    """What ``@ray.remote`` makes of a class: it can be defined, not started."""

    def __init__(self, cls):
        self._cls = cls
        self.__name__ = getattr(cls, "__name__", "actor")
        self.__doc__ = getattr(cls, "__doc__", None)

    def remote(self, *args, **kwargs):
        raise StandInError(message("ray", f"remote: actor {self.__name__}"))

    def options(self, *args, **kwargs):
        raise StandInError(message("ray", f"options: actor {self.__name__}"))

    def __call__(self, *args, **kwargs):
        raise StandInError(message("ray", f"actor {self.__name__}"))


def remote(*args, **kwargs):
    """``@ray.remote`` and ``@ray.remote(...)`` on a class or function."""
    if len(args) == 1 and not kwargs and callable(args[0]):
        return _ActorClass(args[0])
    return _ActorClass


def is_initialized() -> bool:
    """Ray is never initialised in a process that has only this stand-in."""
    return False


__getattr__ = module_getattr("ray")

# As the real package does: `ray.actor.ActorHandle` in AReaL's annotations.
from ray import actor  # noqa: E402, F401
