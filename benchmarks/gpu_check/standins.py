# SPDX-License-Identifier: Apache-2.0
"""The import-only stand-ins for ray, wandb, swanlab and trackio that the GPU check
puts on PYTHONPATH (benchmarks/gpu_check/run.sh), written at run time into a folder
of the check's own:

    python benchmarks/gpu_check/standins.py DEST

The lent GPU machine has none of those libraries and cannot fetch them (ray's wheel
alone is 79 MB of a 64 MiB call); AReaL 1.0.4 imports them at module level but never
uses them on the check's path. They are kept here as text, not as packages under the
real libraries' names in the repository, where any tool that resolves imports by name
would take them for the real ones. Each file's own docstring says what it stands in
for.
"""

from __future__ import annotations

import os
import sys

# Relative path under DEST -> source.
STANDINS: dict[str, str] = {}

STANDINS["_gpu_check_standin.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""What the import-only stand-ins beside this file share (written by
benchmarks/gpu_check/standins.py: ray, wandb, swanlab, trackio).

The lent GPU machine has none of those libraries and cannot fetch them (ray's wheel
alone is 79 MB of a 64 MiB call). AReaL 1.0.4 imports them at module level, but its
local single-node path (SPMD, a remote SGLang-protocol server, trackers disabled)
never uses them. benchmarks/gpu_check/run.sh puts this folder on PYTHONPATH; each
stand-in defines only the names AReaL touches on that path, and anything else, or
any use that would need the real library, raises :class:`StandInError` naming the
stand-in. None has package metadata, so ``importlib.metadata`` based checks
(transformers', accelerate's ``is_wandb_available``) still see the library missing.
"""

from __future__ import annotations


class StandInError(RuntimeError):
    """A stand-in was asked for what only the real library can do."""


def message(lib: str, what: str) -> str:
    return (
        f"{lib}.{what}: '{lib}' here is an import-only stand-in for the GPU check "
        f"(written by benchmarks/gpu_check/standins.py), not the real library, which this "
        "machine does not have"
    )


def refuse(lib: str, what: str):
    """A callable that raises :class:`StandInError` for ``lib.what``."""

    def refused(*args, **kwargs):
        raise StandInError(message(lib, what))

    refused.__name__ = what
    refused.__qualname__ = f"{lib}.{what}"
    return refused


def module_getattr(lib: str):
    """A module ``__getattr__``: every name the stand-in does not define is missing,
    with a message naming the stand-in."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(message(lib, name))

    return __getattr__


def disabled_tracker(lib: str):
    """``init``, ``log`` and ``finish`` of a tracker (wandb, swanlab) that AReaL's
    StatsLogger calls even in mode "disabled": there they do nothing, as the real
    client does; ``init`` with any other mode raises :class:`StandInError`."""

    def init(*args, mode: str | None = None, **kwargs) -> None:
        if mode != "disabled":
            raise StandInError(message(lib, f"init(mode={mode!r})"))

    def nothing(*args, **kwargs) -> None:
        """A disabled run's log or finish: nothing (``init`` allows no other mode)."""

    return init, nothing, nothing
'''

STANDINS["ray/__init__.py"] = '''\
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
'''

STANDINS["ray/actor.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""ray.actor: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins.py: ray). ``ActorHandle`` is a name for AReaL's dataclass
annotations (areal/infra/scheduler/ray.py); there is never an actor to handle."""

from _gpu_check_standin import StandInError, message, module_getattr


class ActorHandle:
    def __init__(self, *args, **kwargs):
        raise StandInError(message("ray.actor", "ActorHandle"))


__getattr__ = module_getattr("ray.actor")
'''

STANDINS["ray/exceptions.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""ray.exceptions: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins.py: ray). The exception classes AReaL's Ray launcher and
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
'''

STANDINS["ray/runtime_env.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""ray.runtime_env: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins.py: ray). ``RuntimeEnv`` can be imported, not made."""

from _gpu_check_standin import StandInError, message, module_getattr


class RuntimeEnv(dict):
    def __init__(self, *args, **kwargs):
        raise StandInError(message("ray.runtime_env", "RuntimeEnv"))


__getattr__ = module_getattr("ray.runtime_env")
'''

STANDINS["ray/util/__init__.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""ray.util: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins.py: ray); only its placement_group and
scheduling_strategies submodules, which AReaL imports from."""

from _gpu_check_standin import module_getattr

__getattr__ = module_getattr("ray.util")
'''

STANDINS["ray/util/placement_group.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""ray.util.placement_group: part of the import-only ray stand-in for the GPU check
(benchmarks/gpu_check/standins.py: ray). ``PlacementGroup`` is a name for signatures;
making or removing one raises an error naming the stand-in."""

from _gpu_check_standin import StandInError, message, module_getattr, refuse


class PlacementGroup:
    def __init__(self, *args, **kwargs):
        raise StandInError(message("ray.util.placement_group", "PlacementGroup"))


placement_group = refuse("ray.util.placement_group", "placement_group")
remove_placement_group = refuse("ray.util.placement_group", "remove_placement_group")

__getattr__ = module_getattr("ray.util.placement_group")
'''

STANDINS["ray/util/scheduling_strategies.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""ray.util.scheduling_strategies: part of the import-only ray stand-in for the GPU
check (benchmarks/gpu_check/standins.py: ray). The strategy class can be imported, not
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
'''

STANDINS["swanlab/__init__.py"] = '''\
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
'''

STANDINS["trackio/__init__.py"] = '''\
# SPDX-License-Identifier: Apache-2.0
"""trackio: an import-only stand-in for the GPU check (benchmarks/gpu_check/run.sh).

Not the real Trackio. AReaL 1.0.4's StatsLogger (areal/utils/stats_logger.py)
imports trackio at module level and calls it only with ``stats_logger.trackio.mode``
other than ``disabled`` (AReaL's default). Every name raises an error naming this
stand-in (``_gpu_check_standin.StandInError``): ``init``, ``log`` and ``finish``,
the names AReaL calls, and AttributeError for the rest.
"""

from __future__ import annotations

from _gpu_check_standin import module_getattr, refuse

init = refuse("trackio", "init")
log = refuse("trackio", "log")
finish = refuse("trackio", "finish")

__getattr__ = module_getattr("trackio")
'''

STANDINS["wandb/__init__.py"] = '''\
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
'''


def write(dest: str) -> None:
    """Every stand-in under ``dest`` (made if missing)."""
    for rel, source in STANDINS.items():
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(source)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python benchmarks/gpu_check/standins.py DEST")
    write(sys.argv[1])
