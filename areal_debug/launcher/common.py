# SPDX-License-Identifier: Apache-2.0
"""What the areal-debug launchers share: reading the config as AReaL's launchers do,
giving it the allocation ``allocation.plan_allocation`` plans, and planning a
replay (its cluster fitted to the training part, its own trial for launcher logs)."""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from areal_debug import areal_compat
from areal_debug.allocation import (
    SERVER_ADDRS_ENV,
    AllocationError,
    AllocationPlan,
    plan_allocation,
)
from areal_debug.config import (
    DebugConfigError,
    check_debug_keys,
    check_debug_section,
    check_recording,
    compose_with_debug_overrides,
    earlier_replays_note,
    refuse_controller_v2,
    replay_trial,
)
from areal_debug.determinism import DETERMINISM_ENV
from areal_debug.logs import get_logger

logger = get_logger("DebugLauncher")


@dataclass
class LaunchPlan:
    config: DictConfig
    # The arguments after the launcher module: script, --config, overrides.
    argv: list[str]
    replay: bool
    extra_env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The recording a replay reads (checked before any process starts).
    recording: str | None = None


def parse_config(argv: list[str]) -> tuple[DictConfig, list[str]]:
    """Compose the YAML with the overrides, as AReaL's launcher does (raw config),
    accepting ``debug.*`` overrides the YAML lacks; returns the argv that composed."""
    from areal.api.cli_args import GRPOConfig

    # A key the YAML and AReaL's config both lack is named with the closest ones
    # (the script's own config class may add keys: those the YAML declares compose).
    return compose_with_debug_overrides(
        areal_compat.parse_launcher_cli_args, argv, GRPOConfig
    )


def _select(cfg: DictConfig, key: str, default=None):
    return OmegaConf.select(cfg, key, default=default)


def plan_launch(argv: list[str], resize_cluster: bool = False) -> LaunchPlan:
    areal_compat.check_areal_version(hooks=areal_compat.LAUNCHER_HOOKS)
    check_debug_keys(argv)
    cfg, argv = parse_config(argv)
    recording = check_debug_section(cfg)
    if _select(cfg, "debug.dump_rollout_data", False) or _select(
        cfg, "debug.replay_rollout_data", False
    ):
        refuse_controller_v2(cfg)
    replay = bool(_select(cfg, "debug.replay_rollout_data", False))
    plan = LaunchPlan(config=cfg, argv=list(argv), replay=replay, recording=recording)
    if bool(_select(cfg, "debug.deterministic", False)):
        plan.extra_env.update(DETERMINISM_ENV)
    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        # AReaL starts a bare `torchrun`: find the one of this Python even when
        # its virtual environment is not activated.
        plan.extra_env["PATH"] = os.pathsep.join([bin_dir, path])
    if not areal_compat.device_control_env_var() and "OMP_NUM_THREADS" in os.environ:
        # On CPU the launcher's default of several threads per process oversubscribes
        # the cores; the caller's setting is passed on.
        plan.extra_env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    mode = "replay" if replay else "launch"
    # With AREAL_LLM_SERVER_ADDRS set, AReaL's launcher would start servers for the
    # serving part and give the trainer their addresses, overwriting the variable:
    # the plan drops that part, and the addresses are passed on.
    servers = "" if replay else os.environ.get(SERVER_ADDRS_ENV, "").strip()
    allocation = plan_allocation(cfg, plan.argv, mode, running_servers=servers)
    plan.notes.extend(allocation.notes)
    allocation.apply(cfg)
    plan.argv = allocation.argv(plan.argv)
    if servers:
        plan.extra_env[SERVER_ADDRS_ENV] = servers
    if not replay:
        return plan
    if resize_cluster:
        _fit_cluster_to_training(cfg, allocation, plan)
    # The launcher's own log (trainer.log) belongs to the replay trial, like the
    # trainer's logs. Unnamed, the trainers choose it as the launcher does here
    # (config.replay_trial): no report is written before they have all started.
    named = _select(cfg, "debug.replay_trial_name")
    if named:
        cfg.trial_name = named
    else:
        fresh = replay_trial(
            str(_select(cfg, "cluster.fileroot")),
            str(cfg.experiment_name),
            str(cfg.trial_name),
        )
        note = earlier_replays_note(str(cfg.trial_name), fresh)
        if note:
            plan.notes.append(note)
        cfg.trial_name = fresh
    _run_replay_once(cfg, plan)
    return plan


def _run_replay_once(cfg: DictConfig, plan: LaunchPlan) -> None:
    """AReaL's launchers re-run a job that ended, finished or not, while
    recover.mode is on or auto (local_main, ray_main, slurm_main: up to
    recover.retries more times): a replay would start again at its first step
    and rewrite its report each time. The launcher's own copy of the config
    says disabled; the trainers' command lines are unchanged (a replay reads
    recover.mode as disabled itself)."""
    mode = str(_select(cfg, "recover.mode", "disabled") or "disabled")
    if mode not in ("on", "auto"):
        return
    OmegaConf.update(cfg, "recover.mode", "disabled")
    plan.notes.append(
        f"Replay: recover.mode={mode} is not passed to AReaL's launcher, which "
        "would run the replay again after it ends; it runs once."
    )


def _fit_cluster_to_training(
    cfg: DictConfig, allocation: AllocationPlan, plan: LaunchPlan
) -> None:
    """Shrink cluster.n_nodes (and n_gpus_per_node on one node) to the training part.

    AReaL's Ray and Slurm launchers give the trainer every node the generation
    servers do not take; with no servers that would be the whole cluster.
    """
    alloc, world = allocation.allocation, allocation.train_world_size
    gpn = int(_select(cfg, "cluster.n_gpus_per_node", 1) or 1)
    if world < gpn:
        nodes, gpn = 1, world
    elif world % gpn == 0:
        nodes = world // gpn
    else:
        raise AllocationError(
            f"The training allocation {alloc!r} needs {world} GPUs, which is not a "
            f"whole number of nodes of cluster.n_gpus_per_node={gpn}. Use a training "
            "allocation that fills whole nodes."
        )
    if (nodes, gpn) != (cfg.cluster.n_nodes, cfg.cluster.n_gpus_per_node):
        plan.notes.append(
            f"Replay: cluster {cfg.cluster.n_nodes} node(s) x {cfg.cluster.n_gpus_per_node} "
            f"GPUs -> {nodes} x {gpn} (the training part only)."
        )
    cfg.cluster.n_nodes, cfg.cluster.n_gpus_per_node = nodes, gpn
    plan.argv += [f"++cluster.n_nodes={nodes}", f"++cluster.n_gpus_per_node={gpn}"]


def run_areal_launcher(plan: LaunchPlan, kind: str, launcher_cls=None):
    """Run AReaL's ``<kind>_main`` on the plan, optionally with another launcher class."""
    for note in plan.notes:
        logger.info(note)
    return areal_compat.run_launcher_main(kind, plan.config, plan.argv, launcher_cls)


def with_extra_env(launcher_cls, extra_env: dict[str, str]):
    """A subclass of an AReaL launcher class that adds ``extra_env`` to every job.

    ``submit_array`` keeps AReaL's signature (``areal_compat.LAUNCHER_ENV_PARAM``
    is one of its parameters): the environment is found however it is passed.
    """
    signature = inspect.signature(launcher_cls.submit_array)
    env_param = areal_compat.LAUNCHER_ENV_PARAM

    def merge(env_vars):
        if isinstance(env_vars, list):
            return [{**(e or {}), **extra_env} for e in env_vars]
        return {**(env_vars or {}), **extra_env}

    class WithEnv(launcher_cls):
        def submit_array(self, *args, **kwargs):
            if env_param not in signature.parameters:  # a stand-in's **kwargs
                kwargs[env_param] = merge(kwargs.get(env_param))
                return super().submit_array(*args, **kwargs)
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments[env_param] = merge(bound.arguments.get(env_param))
            return super().submit_array(*bound.args[1:], **bound.kwargs)

    WithEnv.submit_array.__signature__ = signature
    WithEnv.__name__ = WithEnv.__qualname__ = f"{launcher_cls.__name__}WithEnv"
    return WithEnv


def checked_plan(
    kind: str, argv: list[str], resize_cluster: bool = False
) -> LaunchPlan | None:
    """``plan_launch``, and a replay's recording found, before any process starts;
    None, with the one-line reason on stderr, where the run cannot start."""
    try:
        plan = plan_launch(argv, resize_cluster=resize_cluster)
        if plan.recording is not None:
            check_recording(plan.recording)
    except (AllocationError, DebugConfigError) as e:
        print(f"areal_debug.launcher.{kind}: {e}", file=sys.stderr)
        return None
    return plan


def distributed_main(kind: str, argv: list[str] | None, init=None) -> int:
    """Entry point of the Ray and Slurm wrappers: plan, then AReaL's ``<kind>_main``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    plan = checked_plan(kind, argv, resize_cluster=True)
    if plan is None:
        return 2
    if init is not None:
        init()
    areal_launcher = areal_compat.launcher_class(kind)
    run_areal_launcher(plan, kind, with_extra_env(areal_launcher, plan.extra_env))
    return 0
