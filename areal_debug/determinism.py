# SPDX-License-Identifier: Apache-2.0
"""Deterministic-execution settings: applied by the launcher and the trainer,
recorded in the manifest, and compared when a recording is replayed."""

from __future__ import annotations

import os
from typing import Any

import torch

# The settings the ROLL rollout-mock guide lists for bitwise GPU runs.
DETERMINISM_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
}


def enable_determinism() -> None:
    """Deterministic kernels, as the dump/replay comparison needs on GPUs."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def current_settings() -> dict[str, Any]:
    """What this process runs with, as plain JSON values."""
    settings: dict[str, Any] = {k: os.environ.get(k) for k in DETERMINISM_ENV}
    settings["torch_deterministic_algorithms"] = (
        torch.are_deterministic_algorithms_enabled()
    )
    settings["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    settings["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    return settings


# Settings only GPU kernels read (cuBLAS, NCCL, Transformer Engine, cuDNN): where
# the replay has no GPU they cannot change a result, so a difference in them is
# not worth a warning there (every CPU replay of a launcher's dump had one).
GPU_ONLY = frozenset({*DETERMINISM_ENV, "cudnn_deterministic", "cudnn_benchmark"})


def differences(
    recorded: dict[str, Any], current: dict[str, Any], on_gpu: bool | None = None
) -> list[str]:
    """'key: recorded X, replay Y' for each setting that differs and can matter:
    on a machine without a GPU (``on_gpu`` defaults to whether this process has
    one), the GPU-only settings are left out."""
    if on_gpu is None:
        on_gpu = torch.cuda.is_available()
    return [
        f"{k}: recorded {recorded.get(k)!r}, replay {current.get(k)!r}"
        for k in sorted(set(recorded) | set(current))
        if recorded.get(k) != current.get(k) and (on_gpu or k not in GPU_ONLY)
    ]


# -- RPC workers (single-controller mode) ---------------------------------------------
# The module AReaL's default worker command runs
# (areal_compat.default_worker_commands; the contract test checks that
# configure_workers rewrites each of them).
RPC_SERVER_MODULE = "areal.infra.rpc.rpc_server"
WORKER_MODULE = "areal_debug.single_controller.deterministic_worker"
# Where each worker started through WORKER_MODULE writes the settings it runs with.
WORKER_REPORT_ENV = "AREAL_DEBUG_WORKER_SETTINGS_DIR"
# The experiment's engines whose workers train or serve (config attribute paths;
# a teacher runs as an inference engine or on the training side).
WORKER_ROLES = ("actor", "critic", "ref", "rollout", "teacher.rollout", "teacher.train")


def _role_specs(config):
    for path in WORKER_ROLES:
        engine = config
        for name in path.split("."):
            engine = getattr(engine, name, None)
        for spec in getattr(engine, "scheduling_spec", None) or ():
            yield path.split(".")[0], spec


# Run in each Ray worker process before its actor (scheduler.type: ray).
RAY_SETUP_FUNCTION = f"{WORKER_MODULE}.ray_setup"


def configure_workers(config, report_dir: str) -> list[str]:
    """Make every RPC worker of ``config`` deterministic; returns the roles
    whose custom ``cmd`` could not be given the torch settings.

    The environment goes into each scheduling spec's ``env_vars`` (read by the
    local, Ray and Slurm schedulers alike); the torch settings are process state,
    so AReaL's RPC server module is started through ``WORKER_MODULE``, which
    applies them, reports them to ``report_dir`` and runs the same server. Ray
    workers are actors, not commands: Ray's worker set-up hook does the same.
    """
    from areal_debug.areal_compat import (
        RAY_WORKER_SETUP_HOOK_ENV,
        ray_workers_are_actors,
    )

    on_ray = getattr(getattr(config, "scheduler", None), "type", None) == "ray"
    # Ray actors run no command; where Ray workers run the spec's cmd (AReaL
    # main), they are given the worker module as the local scheduler's are.
    on_ray = on_ray and ray_workers_are_actors()
    unchanged = []
    for role, spec in _role_specs(config):
        spec.env_vars = {
            **(spec.env_vars or {}),
            **DETERMINISM_ENV,
            WORKER_REPORT_ENV: report_dir,
        }
        if on_ray:
            spec.env_vars[RAY_WORKER_SETUP_HOOK_ENV] = RAY_SETUP_FUNCTION
            continue
        cmd = spec.cmd or ""
        if f"-m {RPC_SERVER_MODULE}" in cmd:
            spec.cmd = cmd.replace(RPC_SERVER_MODULE, WORKER_MODULE)
        elif WORKER_MODULE not in cmd and role not in unchanged:
            unchanged.append(role)
    return unchanged


def report_worker_settings() -> None:
    """In a worker: write this process's settings for the controller to read."""
    report_dir = os.environ.get(WORKER_REPORT_ENV)
    if not report_dir:
        return
    import json
    import socket

    os.makedirs(report_dir, exist_ok=True)
    name = f"{socket.gethostname()}-{os.getpid()}.json"
    tmp = os.path.join(report_dir, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(current_settings(), f)
    os.replace(tmp, os.path.join(report_dir, name))


def read_worker_settings(report_dir: str) -> list[dict[str, Any]]:
    """The settings every worker reported, in a stable order."""
    import json

    if not os.path.isdir(report_dir):
        return []
    out = []
    for name in sorted(os.listdir(report_dir)):
        if name.endswith(".json") and not name.startswith("."):
            with open(os.path.join(report_dir, name)) as f:
                out.append(json.load(f))
    return out
