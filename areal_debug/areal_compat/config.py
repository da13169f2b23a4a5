# SPDX-License-Identifier: Apache-2.0
"""The config: composing one without AReaL's side effects, the allocation strings
it holds, and where it puts a trial's logs (areal/api/cli_args.py,
areal/api/alloc_mode.py, areal/utils/stats_logger.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from areal.trainer.rl_trainer import PPOTrainer


# -- config loading without side effects -----------------------------------------------
def compose_config(args: list[str], config_cls):
    """What AReaL's ``load_expr_config`` builds from ``args`` (``--config`` and
    overrides), without saving ``config.yaml`` into the run's log directory as it
    does: for tools that only read a config (``areal-debug doctor``).
    (api/cli_args.py parse_cli_args :3020, to_structured_cfg :3080 in 1.0.4;
    :3169, :3229 in 2.0.0.)"""
    from areal.api.cli_args import parse_cli_args, to_structured_cfg
    from omegaconf import OmegaConf

    cfg, _ = parse_cli_args(args)
    return OmegaConf.to_object(to_structured_cfg(cfg, config_cls=config_cls))


@contextlib.contextmanager
def held_config_warnings():
    """AReaL's own warnings while a config composes (api/cli_args.py's module
    ``logger``, "CLIArgs", :37 in 1.0.4, 2.0.0 and main: e.g. the six-line
    ``use_decoupled_loss`` note), held back from a command's output: yields the
    list their messages go to, for the command to say in its own words."""
    import logging

    from areal.api import cli_args

    held: list[str] = []

    class Hold(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if record.levelno >= logging.WARNING:
                held.append(record.getMessage())
            return False

    hold = Hold()
    cli_args.logger.addFilter(hold)
    try:
        yield held
    finally:
        cli_args.logger.removeFilter(hold)


# -- allocation strings ------------------------------------------------------------------
# AReaL's grammar of an allocation string, areal/api/alloc_mode.py ALLOCATION_GRAMMAR
# (:594 in 1.0.4 and 2.0.0): parts joined by "+" (disaggregate_chain) and "|"
# (colocate_expr), a Megatron part's own "|" inside "(attn:...|ffn:...)"; a part is
# BACKEND["[" NAME "]"]":"dims, or dims alone (train_dims_only, AReaL 0.x style,
# rejected by 1.0.4's launchers). The training backends (TRAIN_BACKEND, :631 in
# 1.0.4, :632 in 2.0.0; _AllocationMode._get_training_allocations :488 in both);
# the other parts serve.
TRAIN_BACKENDS = ("fsdp", "megatron", "archon")
_BARE_DIMS = re.compile(r"^(?:[dptce]\d+)+$")  # DIM_TYPE NUMBER, repeated


def allocation_spans(alloc: str) -> list[tuple[int, int]]:
    """(start, end) of each part of ``alloc`` split at top-level ``+`` and ``|``
    (not those inside a Megatron ``(attn:...|ffn:...)``), empty ones included."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(alloc + "+"):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch in "+|":
            spans.append((start, i))
            start = i + 1
    return spans


def allocation_backend(part: str) -> str:
    """``fsdp`` of ``fsdp:d4`` and ``fsdp[actor]:d4`` (a bare ``d4`` gives ``d4``,
    no backend)."""
    return re.split(r"[\[:]", part, maxsplit=1)[0].strip()


def allocation_name(part: str) -> str:
    """``[actor]`` of ``fsdp[actor]:d4``, "" of an unnamed part."""
    return re.match(r"^\s*\w*(\[\w*\])?", part).group(1) or ""


def unnamed_allocation(part: str) -> str:
    """``fsdp:d4`` of ``fsdp[actor]:d4``: a part as a ``*.backend`` spells it."""
    return re.sub(r"\[\w*\]", "", part, count=1).strip()


def is_bare_allocation(alloc: str) -> bool:
    """Whether ``alloc`` is parallel dimensions alone (``d4p1t1``, AReaL 0.x style)."""
    return bool(_BARE_DIMS.match(alloc))


def parse_allocation(alloc: str):
    """areal/api/alloc_mode.py:383 (1.0.4 and 2.0.0) _AllocationMode.from_str
    (:423; deprecation warnings silenced); raises what AReaL raises on a bad
    string."""
    from areal.api.alloc_mode import _AllocationMode

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _AllocationMode.from_str(alloc)


def allocation_train_world_size(alloc: str) -> int:
    return parse_allocation(alloc).train.world_size


def allocation_train_dp_size(alloc: str) -> int:
    """The training data-parallel size of ``alloc``: _AllocationMode.train
    (alloc_mode.py:539) ParallelStrategy.dp_size (:128; both in 1.0.4 and 2.0.0),
    as PPOTrainer reads it from ``actor_alloc`` (``train_dp_size``)."""
    return parse_allocation(alloc).train.dp_size


# AReaL reads a training layout in two places that never meet: its SPMD launchers
# start ``_AllocationMode.from_str(config.allocation_mode).train.world_size`` trainer
# processes (infra/launcher/local.py:295 and :383 in 1.0.4, :296 and :387 in 2.0.0;
# ray.py and slurm.py likewise), while PPOTrainer.__init__ builds each training
# engine from its own ``<key>.backend`` alone (trainer/rl_trainer.py: actor :132,
# critic :174-175, ref :180, teacher.train :192-193, the same lines in 1.0.4 and
# 2.0.0), never reading allocation_mode. The training engines, by config key:
TRAIN_ENGINE_KEYS = ("actor", "critic", "ref", "teacher.train")


def same_model_allocation(a: str, b: str) -> bool:
    """Whether two one-engine specs (``fsdp:d2``, ``fsdp[actor]:d2p1t1``,
    ``megatron:d2p2t1``) name the same backend and parallelism, read as PPOTrainer
    reads ``*.backend``: areal/api/alloc_mode.py ModelAllocation.from_str (:286)
    and ParallelStrategy.parallelism_eq (:180; Megatron's :242), the same in 1.0.4
    and 2.0.0. Names are ignored; raises what AReaL raises on a bad spec."""
    from areal.api.alloc_mode import ModelAllocation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, y = ModelAllocation.from_str(a), ModelAllocation.from_str(b)
    return (
        x.backend == y.backend
        and type(x.parallel) is type(y.parallel)
        and type(x.parallel).parallelism_eq(x.parallel, y.parallel)
    )


# -- where a trial logs -------------------------------------------------------------------
def trial_log_dir(fileroot: str, experiment: str, trial: str) -> str:
    """The log directory AReaL's StatsLogger gives a trial
    (``<fileroot>/logs/<user>/<experiment>/<trial>``, utils/stats_logger.py:179
    in 1.0.4, 2.0.0 and main), without creating it as get_log_path does: a
    replay's trial is chosen by looking (contract check: the same path)."""
    import getpass

    return os.path.join(fileroot, "logs", getpass.getuser(), experiment, trial)


def stats_log_dir(trainer: PPOTrainer) -> str:
    """Where AReaL's StatsLogger writes this trial's logs
    (utils/stats_logger.py:165 in 1.0.4 and 2.0.0, StatsLogger.get_log_path)."""
    from areal.utils.stats_logger import StatsLogger

    return StatsLogger.get_log_path(trainer.config.stats_logger)


# -- the controller implementation ----------------------------------------------------
# ``rollout._version`` / ``actor._version`` (api/cli_args.py, "v1" or "v2" since
# 1.0.4; PPOTrainer refuses a mismatch): "v2" builds RolloutControllerV2 (the
# gateway and data-proxy inference service, areal/v2/inference_service) and
# GatewayTrainController. Neither goes through the hooks areal-debug records and
# replays at: v2's trajectories come back from its data proxy
# (/export_trajectories), its prepare_batch refuses reward_normalization and
# drop_incomplete_group, and its train side is not the RPC workers' engines.
CONTROLLER_VERSION_KEYS = ("rollout._version", "actor._version")


def controller_v2_keys(cfg) -> list[str]:
    """The keys of ``cfg`` (a DictConfig or a loaded config) that choose AReaL's v2
    controllers; [] for the v1 default."""
    from omegaconf import DictConfig, OmegaConf

    found = []
    for key in CONTROLLER_VERSION_KEYS:
        if isinstance(cfg, DictConfig):
            value = OmegaConf.select(cfg, key, default="v1")
        else:
            section, field = key.split(".")
            value = getattr(getattr(cfg, section, None), field, "v1")
        if str(value) == "v2":
            found.append(key)
    return found
