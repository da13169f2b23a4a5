# SPDX-License-Identifier: Apache-2.0
"""Deterministic-execution settings: applied by the launcher and the trainer,
recorded in the manifest, and compared when a recording is replayed."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any

import torch

# The environment bitwise GPU runs need (gpu-determinism.md): cuBLAS's workspace,
# NCCL's ring order, Transformer Engine's deterministic kernels, and flash-attn's
# deterministic backward, which transformers reads from this variable at each
# call (``torch.use_deterministic_algorithms`` does not reach flash-attn).
DETERMINISM_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "NCCL_ALGO": "Ring",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
    "FLASH_ATTENTION_DETERMINISTIC": "1",
}
# Where a library asked for warn_only deterministic mode and got strict mode
# instead ("file:line"), in this process: recorded beside the settings.
_UPGRADED: list[str] = []


def enable_determinism() -> None:
    """Deterministic kernels, as the dump/replay comparison needs on GPUs, held
    for the rest of the process (see :func:`_hold_strict`). The environment is
    set where the launcher did not already (a script started without it): the
    library settings are read when their library first initialises, which in
    this process is after this call."""
    for key, value in DETERMINISM_ENV.items():
        os.environ.setdefault(key, value)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    _hold_strict()


def _hold_strict() -> None:
    """Keep deterministic algorithms strict after engines initialise.

    AReaL's Megatron and Archon engines call
    ``torch.use_deterministic_algorithms(True, warn_only=True)`` when they start,
    after this plugin's setting, process-wide; under ``warn_only`` PyTorch keeps
    the nondeterministic flash and memory-efficient attention backward (it only
    warns), so a replay's gradients could differ silently. Every later call
    asking for ``warn_only`` gets strict mode, and the caller is recorded."""
    current = torch.use_deterministic_algorithms
    if getattr(current, "_areal_debug_strict", False):
        return

    @functools.wraps(current)
    def use_deterministic_algorithms(mode, *, warn_only=False):
        if mode and warn_only:
            caller = sys._getframe(1)
            where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
            if where not in _UPGRADED:
                _UPGRADED.append(where)
                warnings.warn(
                    f"areal-debug: {where} asked for warn_only deterministic "
                    "algorithms; kept strict, so no nondeterministic kernel (such as "
                    "the flash-attention backward) runs unannounced during a dump or "
                    "replay (debug.deterministic).",
                    stacklevel=2,
                )
            warn_only = False
        return current(mode, warn_only=warn_only)

    use_deterministic_algorithms._areal_debug_strict = True
    torch.use_deterministic_algorithms = use_deterministic_algorithms


def current_settings() -> dict[str, Any]:
    """What this process runs with, as plain JSON values (flat keys, so a
    difference names the one setting): the environment, torch's switches, the
    library versions that choose kernels, and the accelerator."""
    settings: dict[str, Any] = {k: os.environ.get(k) for k in DETERMINISM_ENV}
    settings["torch_deterministic_algorithms"] = (
        torch.are_deterministic_algorithms_enabled()
    )
    settings["torch_deterministic_warn_only"] = (
        torch.is_deterministic_algorithms_warn_only_enabled()
    )
    settings["warn_only_upgraded_at"] = list(_UPGRADED)
    settings["fill_uninitialized_memory"] = bool(
        torch.utils.deterministic.fill_uninitialized_memory
    )
    settings["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    settings["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    settings.update(
        {
            f"env.{k}": v
            for k, v in sorted(os.environ.items())
            if k.startswith("NCCL_") and k not in DETERMINISM_ENV
        }
    )
    settings.update({f"versions.{k}": v for k, v in library_versions().items()})
    settings.update({f"gpu.{k}": v for k, v in accelerator().items()})
    return settings


# Distributions whose version decides which kernels run (None where absent).
VERSIONED = ("transformers", "flash-attn", "flash_attn_3", "transformer-engine")


def library_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"torch": torch.__version__}
    for name in VERSIONED:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        out["cudnn"] = str(torch.backends.cudnn.version())
        try:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a build without NCCL
            out["nccl"] = None
    return out


def accelerator() -> dict[str, Any]:
    """The GPU's name, count and driver (empty without one)."""
    if not torch.cuda.is_available():
        return {}
    out: dict[str, Any] = {
        "name": torch.cuda.get_device_name(),
        "count": torch.cuda.device_count(),
    }
    try:
        import pynvml  # nvidia-ml-py: where present, the driver's own word

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - no NVML: the driver is not recorded
        out["driver"] = None
    return out


# Settings only GPU kernels read (cuBLAS, NCCL, Transformer Engine, cuDNN,
# flash-attn, the GPU itself): where the replay has no GPU they cannot change a
# result, so a difference in them is not worth a warning there (every CPU replay
# of a launcher's dump had one).
GPU_ONLY = frozenset({*DETERMINISM_ENV, "cudnn_deterministic", "cudnn_benchmark"})
GPU_ONLY_PREFIXES = (
    "env.NCCL_",
    "gpu.",
    "versions.cud",
    "versions.nccl",
    "versions.flash",
)


def _gpu_only(key: str) -> bool:
    return key in GPU_ONLY or key.startswith(GPU_ONLY_PREFIXES)


def differences(
    recorded: dict[str, Any], current: dict[str, Any], on_gpu: bool | None = None
) -> list[str]:
    """'key: recorded X, replay Y' for each setting that differs and can matter:
    on a machine without a GPU (``on_gpu`` defaults to whether this process has
    one), the GPU-only settings are left out; a setting the recording does not
    hold (an earlier areal-debug made it) is not compared, except the
    environment variables, which it always held."""
    if on_gpu is None:
        on_gpu = torch.cuda.is_available()
    keys = set(recorded) | {k for k in current if k in DETERMINISM_ENV}
    keys |= {k for k in current if k.startswith("env.NCCL_")}
    return [
        f"{k}: recorded {recorded.get(k)!r}, replay {current.get(k)!r}"
        for k in sorted(keys)
        if recorded.get(k) != current.get(k) and (on_gpu or not _gpu_only(k))
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
