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

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from areal.infra import current_platform
from areal.infra.launcher import local as areal_local
from areal.utils import logging
from omegaconf import DictConfig, OmegaConf

from areal_debug.config import REPLAY_TRIAL_SUFFIX, _append_debug_overrides
from areal_debug.determinism import DETERMINISM_ENV
from areal_debug.launcher.allocation import AllocationError, training_allocation

logger = logging.getLogger("DebugLauncher")


@dataclass
class LaunchPlan:
    config: DictConfig
    argv: list[
        str
    ]  # the arguments after the launcher module: script, --config, overrides
    replay: bool
    extra_env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def parse_config(argv: list[str]) -> tuple[DictConfig, list[str]]:
    """Compose the YAML with the overrides, as AReaL's launcher does.

    ``debug.*`` overrides of keys the YAML lacks are retried as hydra's
    add-or-override (``++debug.k=v``); the returned argv is the form that
    composed, so the trainer processes get the same.
    """
    from hydra.errors import ConfigCompositionException

    try:
        return areal_local.parse_cli_args(argv)[0], argv
    except ConfigCompositionException:
        appended = _append_debug_overrides(argv)
        if appended == argv:
            raise
        return areal_local.parse_cli_args(appended)[0], appended


def _select(cfg: DictConfig, key: str, default=None):
    return OmegaConf.select(cfg, key, default=default)


def plan_launch(argv: list[str]) -> LaunchPlan:
    cfg, argv = parse_config(argv)
    replay = bool(_select(cfg, "debug.replay_rollout_data", False))
    plan = LaunchPlan(config=cfg, argv=list(argv), replay=replay)
    if bool(_select(cfg, "debug.deterministic", False)):
        plan.extra_env.update(DETERMINISM_ENV)
    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        # AReaL starts a bare `torchrun`: find the one of this Python even when
        # its virtual environment is not activated.
        plan.extra_env["PATH"] = os.pathsep.join([bin_dir, path])
    if not current_platform.device_control_env_var and "OMP_NUM_THREADS" in os.environ:
        # On CPU the launcher's default of several threads per process oversubscribes
        # the cores; the caller's setting is passed on.
        plan.extra_env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    if not replay:
        return plan
    alloc, note = training_allocation(
        str(_select(cfg, "allocation_mode", "") or ""), _select(cfg, "actor.backend")
    )
    if note:
        plan.notes.append(note)
    plan.notes.append(
        f"Replay: allocation_mode {_select(cfg, 'allocation_mode')!r} -> {alloc!r}; "
        "no inference server is started."
    )
    cfg.allocation_mode = alloc
    # The trainer processes parse argv themselves: they must see the same allocation.
    plan.argv = [
        a for a in plan.argv if not a.lstrip("+").startswith("allocation_mode=")
    ]
    plan.argv.append(f"++allocation_mode={alloc}")
    # The launcher's own log (trainer.log) belongs to the replay trial, like the
    # trainer's logs; the trainer derives its trial from the original one itself.
    cfg.trial_name = _select(cfg, "debug.replay_trial_name") or (
        str(cfg.trial_name) + REPLAY_TRIAL_SUFFIX
    )
    return plan


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


def run_with_areal(plan: LaunchPlan, areal_main: Callable, launcher_attr: str) -> int:
    """Run one of AReaL's launcher entry points on the plan; return an exit code."""
    from areal.infra.utils.launcher import JobException, JobState

    for note in plan.notes:
        logger.info(note)
    CpuSafeLocalLauncher.extra_env = dict(plan.extra_env)
    CpuSafeLocalLauncher.started = {}
    module = sys.modules[areal_main.__module__]
    original = getattr(module, launcher_attr, None)
    saved_argv = sys.argv
    # AReaL joins sys.argv into a shell command for every process it starts.
    sys.argv = [saved_argv[0]] + [shlex.quote(a) for a in plan.argv]
    if original is not None:
        setattr(module, launcher_attr, CpuSafeLocalLauncher)
    try:
        areal_main(plan.config, run_id=0)
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
    finally:
        sys.argv = saved_argv
        if original is not None:
            setattr(module, launcher_attr, original)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        plan = plan_launch(argv)
    except AllocationError as e:
        print(f"areal_debug.launcher.local: {e}", file=sys.stderr)
        return 2
    return run_with_areal(plan, areal_local.local_main, "LocalLauncher")


if __name__ == "__main__":
    sys.exit(main())
