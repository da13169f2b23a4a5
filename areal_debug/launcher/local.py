# SPDX-License-Identifier: Apache-2.0
"""Drop-in for AReaL's local launcher that starts no inference server in replay mode.

    python -m areal_debug.launcher.local <script.py> --config <yaml> [overrides]

Replay mode (``debug.replay_rollout_data=true`` in the YAML or on the command
line): only the trainer starts, with the training part of ``allocation_mode``
(``sglang:d4p1t1+fsdp:d4p1t1`` -> ``fsdp:d4p1t1``), and the trainer processes
see the same rewritten allocation. Dump mode and debug off run AReaL's launcher
as it is, with two fixes for CPU machines (``areal_compat.cpu_safe_local_launcher_class``)
and the determinism environment when ``debug.deterministic: true``.
"""

from __future__ import annotations

import sys

from areal_debug import areal_compat
from areal_debug.launcher.common import (
    LaunchPlan,
    checked_plan,
    logger,
    run_areal_launcher,
)

CpuSafeLocalLauncher = areal_compat.cpu_safe_local_launcher_class()


def _trainer_returncode() -> int | None:
    proc = CpuSafeLocalLauncher.started.get("trainer/0")
    return None if proc is None else proc.wait()


def run_local(plan: LaunchPlan) -> int:
    """Run AReaL's local launcher on the plan; return the trainer's exit status."""
    JobException, JobState = areal_compat.job_exception_types()
    CpuSafeLocalLauncher.extra_env = dict(plan.extra_env)
    CpuSafeLocalLauncher.started = {}
    try:
        run_areal_launcher(plan, "local", CpuSafeLocalLauncher)
    except JobException as e:
        rc = _trainer_returncode()
        if e.reason == JobState.COMPLETED and rc == 0:
            logger.info("Trainer finished successfully.")
            return 0
        # AReaL's local launcher reports a job that exited as COMPLETED whatever
        # its status: the exit status alone says how it ended.
        logger.error(
            f"Trainer failed (exit status {rc}); its error is in the output above."
        )
        return rc or 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plan = checked_plan("local", argv)
    return 2 if plan is None else run_local(plan)


if __name__ == "__main__":
    sys.exit(main())
