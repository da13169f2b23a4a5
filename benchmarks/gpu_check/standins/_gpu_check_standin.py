# SPDX-License-Identifier: Apache-2.0
"""What the import-only stand-ins beside this file share (benchmarks/gpu_check/standins:
ray, wandb, swanlab, trackio).

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
        f"(benchmarks/gpu_check/standins/{lib}), not the real library, which this "
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
