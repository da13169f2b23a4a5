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

from areal_debug import areal_compat
from areal_debug.logs import get_logger

logger = get_logger("DebugServerAttach")

SERVER_ADDRS_ENV = "AREAL_LLM_SERVER_ADDRS"
# A teacher served as an inference engine (teacher.engine_type=rollout): AReaL has
# no variable for it and always launches its servers in single-controller mode.
TEACHER_ADDRS_ENV = "AREAL_DEBUG_TEACHER_SERVER_ADDRS"


def server_infos_from_env(n_servers: int, env: str = SERVER_ADDRS_ENV) -> list | None:
    """Already-running inference servers named by the variable ``env``; ``None``
    when it is unset."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return None
    addrs = [a.strip() for a in raw.split(",") if a.strip()]
    if len(addrs) != n_servers:
        raise ValueError(
            f"{env}={raw!r} names {len(addrs)} server(s), but the allocation has "
            f"{n_servers} data-parallel instance(s): each inference worker attaches "
            f"to one server. Give one host:port per instance, or unset {env} to "
            "let AReaL launch servers."
        )
    infos = []
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(
                f"{env} entry {addr!r} is not host:port (e.g. 127.0.0.1:30000)."
            )
        infos.append(areal_compat.inference_server_info(host, int(port)))
    return infos


def attach_rollout_controller(trainer: Any, rollout_config) -> Any | None:
    """AReaL's rollout controller attached to the servers of
    ``AREAL_LLM_SERVER_ADDRS``, or ``None`` when the variable is unset."""
    return _attach(
        trainer.scheduler,
        rollout_config,
        role="rollout",
        env=SERVER_ADDRS_ENV,
        n_servers=areal_compat.rollout_dp_size(trainer),
        backend=areal_compat.rollout_backend(trainer),
    )


def attach_teacher_controller(trainer: Any, rollout_config) -> Any | None:
    """The teacher's controller attached to the servers of
    ``AREAL_DEBUG_TEACHER_SERVER_ADDRS``, or ``None`` when the variable is unset."""
    return _attach(
        trainer.scheduler,
        rollout_config,
        role="teacher",
        env=TEACHER_ADDRS_ENV,
        n_servers=areal_compat.teacher_dp_size(trainer),
        backend=areal_compat.teacher_backend(trainer),
    )


def _attach(scheduler, rollout_config, *, role, env, n_servers, backend):
    infos = server_infos_from_env(n_servers, env)
    if infos is None:
        return None
    if areal_compat.rollout_controller_version(rollout_config) == "v2":
        raise ValueError(
            f"Attaching to running inference servers ({env}) works with AReaL's "
            "rollout controller v1, not _version=v2."
        )
    engine_cls = areal_compat.rollout_controller_class(backend)
    controller = engine_cls.as_controller(deepcopy(rollout_config), scheduler)
    addrs = ", ".join(f"{i.host}:{i.port}" for i in infos)
    logger.info(f"The {role} workers attach to running inference servers: {addrs}")
    controller.initialize(role=role, server_infos=infos)
    return controller
