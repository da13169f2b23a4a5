# SPDX-License-Identifier: Apache-2.0
"""Single-controller dump: rollout workers attach to already-running inference servers.

In SPMD mode AReaL's launchers pass server addresses in ``AREAL_LLM_SERVER_ADDRS``;
in single-controller mode AReaL launches its own servers unless told where they
run. With the variable set, AReaL's rollout controller and workers attach to
those servers, as AReaL's own eval rollout does.
"""

from __future__ import annotations

import os
from copy import deepcopy
from typing import Any

from areal.utils import logging

from areal_debug import areal_compat

logger = logging.getLogger("DebugServerAttach")

SERVER_ADDRS_ENV = "AREAL_LLM_SERVER_ADDRS"


def server_infos_from_env(n_servers: int) -> list | None:
    """Already-running inference servers named by ``AREAL_LLM_SERVER_ADDRS``;
    ``None`` when the variable is unset."""
    raw = os.environ.get(SERVER_ADDRS_ENV, "").strip()
    if not raw:
        return None
    addrs = [a.strip() for a in raw.split(",") if a.strip()]
    if len(addrs) != n_servers:
        raise ValueError(
            f"{SERVER_ADDRS_ENV}={raw!r} names {len(addrs)} server(s), but the "
            f"rollout allocation has {n_servers} data-parallel instance(s): each "
            "rollout worker attaches to one server. Give one host:port per "
            f"instance, or unset {SERVER_ADDRS_ENV} to let AReaL launch servers."
        )
    infos = []
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(
                f"{SERVER_ADDRS_ENV} entry {addr!r} is not host:port (e.g. "
                "127.0.0.1:30000)."
            )
        infos.append(areal_compat.inference_server_info(host, int(port)))
    return infos


def attach_rollout_controller(trainer: Any, rollout_config) -> Any | None:
    """AReaL's rollout controller attached to the servers of
    ``AREAL_LLM_SERVER_ADDRS``, or ``None`` when the variable is unset."""
    infos = server_infos_from_env(areal_compat.rollout_dp_size(trainer))
    if infos is None:
        return None
    if areal_compat.rollout_controller_version(rollout_config) == "v2":
        raise ValueError(
            "Attaching to running inference servers (AREAL_LLM_SERVER_ADDRS) "
            "works with AReaL's rollout controller v1, not rollout._version=v2."
        )
    engine_cls = areal_compat.rollout_controller_class(
        areal_compat.rollout_backend(trainer)
    )
    controller = engine_cls.as_controller(deepcopy(rollout_config), trainer.scheduler)
    addrs = ", ".join(f"{i.host}:{i.port}" for i in infos)
    logger.info(f"Rollout workers attach to running inference servers: {addrs}")
    controller.initialize(role="rollout", server_infos=infos)
    return controller
