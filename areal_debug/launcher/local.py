# SPDX-License-Identifier: Apache-2.0
"""Drop-in for AReaL's local launcher that starts no inference server in replay mode.

    python -m areal_debug.launcher.local <script.py> --config <yaml> [overrides]

Replay mode (``debug.replay_rollout_data=true`` in the YAML or on the command
line): only the trainer starts, with the training part of ``allocation_mode``
(``sglang:d4p1t1+fsdp:d4p1t1`` -> ``fsdp:d4p1t1``), and the trainer processes
see the same rewritten allocation. Dump mode and debug off run AReaL's launcher
as it is, with two fixes for CPU machines (see ``CpuSafeLocalLauncher``) and the
determinism environment when ``debug.deterministic: true``.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from areal.infra import current_platform
from areal.infra.launcher import local as areal_local

from areal_debug.launcher.allocation import AllocationError
from areal_debug.launcher.common import (
    LaunchPlan,
    logger,
    plan_launch,
    run_areal_launcher,
)


class CpuSafeLocalLauncher(areal_local.LocalLauncher):
    """AReaL 1.0.4's LocalLauncher with two CPU problems fixed, nothing else changed.

    1. ``CpuPlatform.device_control_env_var`` is empty, so AReaL emits
       ``=0 stdbuf ...`` and the shell fails: on CPU no device variable is set.
    2. Every job runs as ``cmd 2>&1 | tee log`` under /bin/sh, whose status is
       tee's, so a failed trainer looks finished and a finished one is reported
       as ``JobException(COMPLETED)``: run it under ``bash -o pipefail`` and keep
       the Popen, so the real exit status can be read.
    """

    extra_env: dict[str, str] = {}
    # Every process started, by job name; AReaL's stop_all forgets its own table.
    started: dict[str, subprocess.Popen] = {}

    def submit_array(self, job_name, cmd, count=1, gpu=0, env_vars=None):
        env_vars = {**(env_vars or {}), **self.extra_env}
        if not isinstance(cmd, list):
            cmd = [cmd] * count
        offset = self._job_counter[job_name]
        device_var = current_platform.device_control_env_var
        for i in range(count):
            job_env = dict(env_vars)
            if gpu > 0 and device_var:
                devices = []
                for _ in range(gpu):
                    devices.append(
                        self._gpu_devices[self._gpu_counter % len(self._gpu_devices)]
                    )
                    self._gpu_counter += 1
                job_env[device_var] = ",".join(str(d) for d in devices)
            c = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in job_env.items())
            c = f"{c} stdbuf -oL {cmd[i]} 2>&1 | tee -a {shlex.quote(self.log_path_of(job_name))}"
            logger.info("Starting local process with command: %s", c)
            process = subprocess.Popen(
                ["bash", "-o", "pipefail", "-c", c],
                stdout=sys.stdout,
                stderr=sys.stdout,
            )
            self._jobs[f"{job_name}/{offset + i}"] = process
            CpuSafeLocalLauncher.started[f"{job_name}/{offset + i}"] = process
            self._job_counter[job_name] += 1


def _trainer_returncode() -> int | None:
    proc = CpuSafeLocalLauncher.started.get("trainer/0")
    return None if proc is None else proc.wait()


def run_local(plan: LaunchPlan) -> int:
    """Run AReaL's local launcher on the plan; return the trainer's exit status."""
    from areal.infra.utils.launcher import JobException, JobState

    CpuSafeLocalLauncher.extra_env = dict(plan.extra_env)
    CpuSafeLocalLauncher.started = {}
    try:
        run_areal_launcher(
            plan, areal_local.local_main, "LocalLauncher", CpuSafeLocalLauncher
        )
    except JobException as e:
        rc = _trainer_returncode()
        if e.reason == JobState.COMPLETED and rc == 0:
            logger.info("Trainer finished successfully.")
            return 0
        logger.error(
            f"Trainer failed (exit status {rc}, job state {e.reason.name}); its "
            "error is in the output above."
        )
        return rc or 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        plan = plan_launch(argv)
    except AllocationError as e:
        print(f"areal_debug.launcher.local: {e}", file=sys.stderr)
        return 2
    return run_local(plan)


if __name__ == "__main__":
    sys.exit(main())
