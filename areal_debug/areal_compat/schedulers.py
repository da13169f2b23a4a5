# SPDX-License-Identifier: Apache-2.0
"""The schedulers: what AReaL's local and Ray schedulers start (RPC workers, the
config sent to them, their commands) and Ray's own hooks
(areal/infra/scheduler/, areal/infra/rpc/).
"""

from __future__ import annotations

import dataclasses
from typing import Any


# -- the scheduler's workers ---------------------------------------------------------------
def scheduler_has_workers(scheduler: Any) -> bool:
    """LocalScheduler._workers (areal/infra/scheduler/local.py:172 in 1.0.4 and
    2.0.0) is non-empty."""
    return bool(getattr(scheduler, "_workers", None))


def importable_class(cls: type) -> type:
    """``cls`` or its nearest experiment-config base an RPC worker can import
    by ``module.__name__`` (areal/infra/rpc/serialization.py:290-336 in 1.0.4 and
    2.0.0)."""
    import importlib

    from areal.api.cli_args import BaseExperimentConfig

    for base in cls.__mro__:
        # Mixins (DebugSection) are importable but not experiment configs.
        if not (isinstance(base, type) and issubclass(base, BaseExperimentConfig)):
            continue
        try:
            module = importlib.import_module(base.__module__)
        except ImportError:
            continue
        if (
            base.__module__ != "__main__"
            and getattr(module, base.__name__, None) is base
        ):
            return base
    return cls


def send_importable_config(scheduler: Any, config) -> type | None:
    """Give the scheduler's workers a config class they can rebuild.

    AReaL's schedulers send ``exp_config`` to every worker's ``/configure``
    (infra/scheduler/local.py:1008-1030), which rebuilds it by import path and
    reads ``seed`` (infra/rpc/guard/engine_blueprint.py:212-219; both locations
    the same in 1.0.4 and 2.0.0). A class from
    the script's ``__main__`` cannot be imported there and comes back as a dict,
    so the worker fails. Workers then get the fields of its nearest importable
    base; returns that base when a substitution was made.
    """
    cls = type(config)
    base = importable_class(cls)
    if base is cls or getattr(scheduler, "exp_config", None) is not config:
        return None
    names = {f.name for f in dataclasses.fields(base) if f.init}
    scheduler.exp_config = base(**{n: getattr(config, n) for n in names})
    return base


def default_worker_commands() -> dict[str, str]:
    """The ``cmd`` AReaL gives each engine's RPC workers by default, by config
    class: ``SchedulingSpec(cmd="python -m areal.infra.rpc.rpc_server")`` of
    TrainEngineConfig.scheduling_spec and InferenceEngineConfig.scheduling_spec
    (api/cli_args.py:1193, :2161 in 1.0.4; :1250, :2302 in 2.0.0).
    ``determinism.configure_workers`` rewrites it to start its own worker."""
    from areal.api.cli_args import InferenceEngineConfig, TrainEngineConfig

    commands = {}
    for cls in (TrainEngineConfig, InferenceEngineConfig):
        specs = cls.__dataclass_fields__["scheduling_spec"].default_factory()
        commands[cls.__name__] = specs[0].cmd
    return commands


def run_rpc_server() -> None:
    """areal/infra/rpc/rpc_server.py:33 (1.0.4 and 2.0.0) main: the RPC worker's
    server, reading its own command line (the scheduling spec's ``cmd`` plus the
    scheduler's)."""
    from areal.infra.rpc import rpc_server

    rpc_server.main()


# -- Ray (scheduler.type: ray) ---------------------------------------------------------------
# RayScheduler starts workers as Ray actors (areal/infra/scheduler/ray.py:191-200
# (1.0.4, 2.0.0)): SchedulingSpec.cmd is never run, env_vars reach them through the
# runtime env. Ray runs the function named by this variable in each worker process
# before any actor (ray/_private/workers/default_worker.py:313-320;
# ray_constants.py:674; Ray's own files, ray 2.60.0 with either AReaL).
RAY_WORKER_SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
# AReaL's default (30 s) for worker start-up counts a worker's import of torch and
# AReaL; on a busy machine that takes longer.
RAY_MIN_STARTUP_TIMEOUT = 180.0


def ray_workers_are_actors() -> bool:
    """Whether RayScheduler runs its workers as Ray actors (1.0.4 and 2.0.0:
    areal/infra/rpc/ray_rpc_server.py), which never run the scheduling spec's
    ``cmd``. AReaL main (#1441) starts the same HTTP RPC worker as the local
    scheduler, from ``cmd``, inside a launcher actor, and has no such module."""
    import importlib.util

    return importlib.util.find_spec("areal.infra.rpc.ray_rpc_server") is not None


def is_ray_scheduler(scheduler: Any) -> bool:
    """areal/infra/scheduler/ray.py:58 (1.0.4 and 2.0.0) RayScheduler."""
    return type(scheduler).__name__ == "RayScheduler"


def lengthen_ray_startup(scheduler: Any) -> None:
    """RayScheduler.startup_timeout (ray.py:61-68 in 1.0.4 and 2.0.0): at least
    RAY_MIN_STARTUP_TIMEOUT."""
    if is_ray_scheduler(scheduler):
        current = getattr(scheduler, "startup_timeout", 0) or 0
        scheduler.startup_timeout = max(current, RAY_MIN_STARTUP_TIMEOUT)


def ray_connected() -> bool:
    import ray

    return ray.is_initialized()
