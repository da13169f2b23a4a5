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

from areal_debug.launcher.allocation import AllocationError
from areal_debug.launcher.common import plan_launch, run_areal_launcher, with_extra_env


def main(argv: list[str] | None = None) -> int:
    from areal.infra.launcher import ray as areal_ray

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        plan = plan_launch(argv, resize_cluster=True)
    except AllocationError as e:
        print(f"areal_debug.launcher.ray: {e}", file=sys.stderr)
        return 2
    import ray

    ray.init()
    launcher_cls = with_extra_env(areal_ray.RayLauncher, plan.extra_env)
    run_areal_launcher(plan, areal_ray.ray_main, "RayLauncher", launcher_cls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
