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

from areal_debug.launcher.common import distributed_main


def main(argv: list[str] | None = None) -> int:
    return distributed_main("slurm", argv)


if __name__ == "__main__":
    sys.exit(main())
