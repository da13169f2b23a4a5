# SPDX-License-Identifier: Apache-2.0
"""``python -m areal_debug.single_controller.deterministic_worker``: AReaL's RPC server with
deterministic kernels on, for ``debug.deterministic`` in single-controller mode.

The torch settings are per process, so the controller cannot set them in its
workers; it starts them through this module instead (``determinism.configure_workers``),
or, with ``scheduler.type: ray``, names ``ray_setup`` as Ray's worker set-up hook.
"""

from __future__ import annotations


def main() -> None:
    from areal_debug.areal_compat import run_rpc_server

    ray_setup()
    run_rpc_server()


def ray_setup() -> None:
    """The settings and their report, in this process. Also Ray's worker set-up
    hook (scheduler.type: ray), run in each Ray worker before AReaL's RPC actor."""
    from areal_debug.determinism import enable_determinism, report_worker_settings

    enable_determinism()
    report_worker_settings()


if __name__ == "__main__":
    main()
