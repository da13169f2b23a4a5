# SPDX-License-Identifier: Apache-2.0
"""Drop-in for AReaL's Slurm launcher that starts no inference server in replay mode.

    python -m areal_debug.launcher.slurm <script.py> --config <yaml> [overrides]

Replay mode submits only the trainer, with the training part of
``allocation_mode`` and a cluster shrunk to it (AReaL's Slurm launcher otherwise
gives the trainer every node the servers do not take). Dump mode and debug off
run AReaL's Slurm launcher unchanged, plus the determinism environment.
It submits through sbatch/srun, which this project's CI does not have.
"""

from __future__ import annotations

import sys

from areal_debug.launcher.allocation import AllocationError
from areal_debug.launcher.common import plan_launch, run_areal_launcher, with_extra_env


def main(argv: list[str] | None = None) -> int:
    from areal.infra.launcher import slurm as areal_slurm

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        plan = plan_launch(argv, resize_cluster=True)
    except AllocationError as e:
        print(f"areal_debug.launcher.slurm: {e}", file=sys.stderr)
        return 2
    launcher_cls = with_extra_env(areal_slurm.SlurmLauncher, plan.extra_env)
    run_areal_launcher(plan, areal_slurm.slurm_main, "SlurmLauncher", launcher_cls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
