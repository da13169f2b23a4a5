# SPDX-License-Identifier: Apache-2.0
"""Drop-in for AReaL's Ray launcher that starts no inference server in replay mode.

    python -m areal_debug.launcher.ray <script.py> --config <yaml> [overrides]

Replay mode submits only the trainer, with the training part of
``allocation_mode`` and a cluster shrunk to it (AReaL's Ray launcher otherwise
gives the trainer every node the servers do not take). Dump mode and debug off
run AReaL's Ray launcher unchanged, plus the determinism environment.
AReaL 1.0.4's Ray launcher requests GPUs for every task; it does not run on a
CPU-only Ray cluster.
"""

from __future__ import annotations

import sys

from areal_debug.launcher.common import distributed_main


def _init_ray() -> None:
    import ray

    ray.init()


def main(argv: list[str] | None = None) -> int:
    return distributed_main("ray", argv, init=_init_ray)


if __name__ == "__main__":
    sys.exit(main())
