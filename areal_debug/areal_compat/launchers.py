# SPDX-License-Identifier: Apache-2.0
"""The launchers: AReaL's local, Ray and Slurm launchers run as they are, their
``<kind>_main`` with our argv and launcher class, and the local launcher's
``submit_array`` mirrored with two CPU fixes (areal/infra/launcher/).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import warnings

from areal_debug.logs import get_logger

logger = get_logger("DebugArealCompat")


def parse_launcher_cli_args(argv: list[str]):
    """The raw config AReaL's launchers compose (areal/infra/launcher/local.py
    parse_cli_args, imported at :21 from api/cli_args.py:3020 in 1.0.4, :3169 in
    2.0.0)."""
    from areal.infra.launcher import local as areal_local

    return areal_local.parse_cli_args(argv)[0]


def device_control_env_var() -> str:
    """The platform's visible-devices variable (empty on CPU)."""
    from areal.infra import current_platform

    return current_platform.device_control_env_var


def cpu_safe_local_launcher_class():
    """AReaL's LocalLauncher (areal/infra/launcher/local.py:87 in 1.0.4, 88 in
    2.0.0) with two CPU problems fixed, nothing else changed.

    1. ``CpuPlatform.device_control_env_var`` is empty, so AReaL emits
       ``=0 stdbuf ...`` and the shell fails: on CPU no device variable is set.
    2. Every job runs as ``cmd 2>&1 | tee log`` under /bin/sh, whose status is
       tee's, so a failed trainer looks finished and a finished one is reported
       as ``JobException(COMPLETED)``: run it under ``bash -o pipefail`` and keep
       the Popen, so the real exit status can be read.

    ``submit_array`` mirrors LocalLauncher.submit_array (local.py:121 in 1.0.4,
    122 in 2.0.0) and its private ``_jobs``, ``_job_counter``, ``_gpu_devices``,
    ``_gpu_counter``.
    """
    from areal.infra.launcher import local as areal_local

    class CpuSafeLocalLauncher(areal_local.LocalLauncher):
        extra_env: dict[str, str] = {}
        # Every process started, by job name; AReaL's stop_all forgets its own table.
        started: dict[str, subprocess.Popen] = {}

        def submit_array(self, job_name, cmd, count=1, gpu=0, env_vars=None):
            env_vars = {**(env_vars or {}), **self.extra_env}
            if not isinstance(cmd, list):
                cmd = [cmd] * count
            offset = self._job_counter[job_name]
            device_var = device_control_env_var()
            for i in range(count):
                job_env = dict(env_vars)
                if gpu > 0 and device_var:
                    devices = []
                    for _ in range(gpu):
                        devices.append(
                            self._gpu_devices[
                                self._gpu_counter % len(self._gpu_devices)
                            ]
                        )
                        self._gpu_counter += 1
                    job_env[device_var] = ",".join(str(d) for d in devices)
                c = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in job_env.items())
                log = shlex.quote(self.log_path_of(job_name))
                c = f"{c} stdbuf -oL {cmd[i]} 2>&1 | tee -a {log}"
                logger.info("Starting local process with command: %s", c)
                process = subprocess.Popen(
                    ["bash", "-o", "pipefail", "-c", c],
                    stdout=sys.stdout,
                    stderr=sys.stdout,
                )
                self._jobs[f"{job_name}/{offset + i}"] = process
                type(self).started[f"{job_name}/{offset + i}"] = process
                self._job_counter[job_name] += 1

        def forget_jobs(self) -> None:
            """Drop the job table without stopping anything (tests)."""
            self._jobs.clear()

    return CpuSafeLocalLauncher


def job_exception_types():
    """(JobException, JobState) of areal/infra/utils/launcher.py (:180, :168 in
    1.0.4; :181, :169 in 2.0.0)."""
    from areal.infra.utils.launcher import JobException, JobState

    return JobException, JobState


# RayLauncher.submit_array (ray.py:144 in 1.0.4, :145 in 2.0.0) and
# SlurmLauncher.submit_array (slurm.py:99 in 1.0.4, :100 in 2.0.0) take every job's
# environment as this parameter: a dict, for Slurm also a list of one per task.
LAUNCHER_ENV_PARAM = "env_vars"

LAUNCHER_CLASS_ATTR = {
    "local": "LocalLauncher",
    "ray": "RayLauncher",
    "slurm": "SlurmLauncher",
}


def _launcher_module(kind: str):
    import importlib

    return importlib.import_module(f"areal.infra.launcher.{kind}")


def launcher_class(kind: str):
    """The launcher class AReaL's ``<kind>_main`` instantiates
    (areal/infra/launcher/{local,ray,slurm}.py: LocalLauncher :87, RayLauncher
    :80, SlurmLauncher :52 in 1.0.4; :88, :81, :53 in 2.0.0), read at call time."""
    return getattr(_launcher_module(kind), LAUNCHER_CLASS_ATTR[kind])


def run_launcher_main(kind: str, config, argv: list[str], launcher_cls=None):
    """Run AReaL's ``<kind>_main(config, run_id=0)`` as if started with ``argv``
    (local_main, ray_main, slurm_main: local.py:270, ray.py:348, slurm.py:410 in
    1.0.4; :271, :349, :411 in 2.0.0).

    AReaL builds every job's command line from ``sys.argv``, so the argv is put
    there (shell-quoted) for the duration; ``launcher_cls`` replaces the module's
    launcher class for the duration. Both are restored here, also on failure.
    """
    module = _launcher_module(kind)
    attr = LAUNCHER_CLASS_ATTR[kind]
    original = getattr(module, attr)
    saved_argv = sys.argv
    sys.argv = [saved_argv[0]] + [shlex.quote(a) for a in argv]
    if launcher_cls is not None:
        setattr(module, attr, launcher_cls)
    try:
        with warnings.catch_warnings():
            # Every <kind>_main warns that SPMD launchers use a deprecated parser
            # and refuse bare dimension strings (local.py:274 in 1.0.4): areal-debug
            # has given every part its backend (allocation.py); said once, ours.
            warnings.filterwarnings(
                "ignore",
                message="SPMD launchers use the deprecated",
                category=FutureWarning,
            )
            logger.info(
                "AReaL's SPMD launchers are deprecated upstream in favour of "
                "single-controller mode (scheduler.type=local); this run's allocation "
                "names every backend, as they require."
            )
            return getattr(module, f"{kind}_main")(config, run_id=0)
    finally:
        sys.argv = saved_argv
        setattr(module, attr, original)
