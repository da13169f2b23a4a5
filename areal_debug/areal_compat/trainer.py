# SPDX-License-Identifier: Apache-2.0
"""The trainer: ``PPOTrainer``'s private hooks under public names, closing a
half-built trainer, the step's statistics, and the trainer state areal-debug reads
(areal/trainer/rl_trainer.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from areal.trainer.rl_trainer import PPOTrainer
from areal.utils import logging

logger = logging.getLogger("DebugArealCompat")


# -- the trainer's overridable hooks -----------------------------------------------------
class TrainerHooks(PPOTrainer):
    """AReaL's private ``PPOTrainer`` hooks (``areal/trainer/rl_trainer.py``) under
    public names. Subclasses override the public names; ``super()`` reaches the next
    class in the MRO, so a user's own ``PPOTrainer`` subclass composes."""

    # rl_trainer.py:915 (1.0.4), :927 (2.0.0) PPOTrainer._init_scheduler
    def _init_scheduler(self):
        return self.build_scheduler()

    def build_scheduler(self):
        return super()._init_scheduler()

    # rl_trainer.py:925 (1.0.4), :937 (2.0.0) PPOTrainer._create_dataloader
    def _create_dataloader(self, dataset, dataset_config, rank, world_size):
        return self.build_dataloader(dataset, dataset_config, rank, world_size)

    def build_dataloader(self, dataset, dataset_config, rank, world_size):
        return super()._create_dataloader(dataset, dataset_config, rank, world_size)

    # rl_trainer.py:951 (1.0.4), :963 (2.0.0) PPOTrainer._create_train_engine
    # (actor, ref, train teacher)
    def _create_train_engine(self, actor_config, alloc):
        return self.build_train_engine(actor_config, alloc)

    def build_train_engine(self, actor_config, alloc):
        return super()._create_train_engine(actor_config, alloc)

    # rl_trainer.py:978 (1.0.4), :990 (2.0.0) PPOTrainer._create_critic
    def _create_critic(self, critic_config, alloc):
        return self.build_critic(critic_config, alloc)

    def build_critic(self, critic_config, alloc):
        return super()._create_critic(critic_config, alloc)

    # rl_trainer.py:1005 (1.0.4), :1017 (2.0.0) PPOTrainer._init_rollout
    # (rollout and eval rollout)
    def _init_rollout(self, rollout_config, is_eval=False, lora_path=None):
        return self.build_inference_engine(rollout_config, is_eval, lora_path)

    def build_inference_engine(self, rollout_config, is_eval=False, lora_path=None):
        return super()._init_rollout(
            rollout_config, is_eval=is_eval, lora_path=lora_path
        )

    # rl_trainer.py:1092 (1.0.4), :1104 (2.0.0) PPOTrainer._init_teacher_rollout
    # (teacher.engine_type=rollout)
    def _init_teacher_rollout(self, rollout_config):
        return self.build_teacher_engine(rollout_config)

    def build_teacher_engine(self, rollout_config):
        return super()._init_teacher_rollout(rollout_config)

    # rl_trainer.py:1192 (1.0.4), :1204 (2.0.0) PPOTrainer._save_recover_checkpoint
    def _save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int):
        return self.save_recover_checkpoint(epoch, epoch_step, global_step)

    def save_recover_checkpoint(self, epoch: int, epoch_step: int, global_step: int):
        return super()._save_recover_checkpoint(epoch, epoch_step, global_step)

    # rl_trainer.py:1241 (1.0.4), :1253 (2.0.0) PPOTrainer._evaluate
    def _evaluate(
        self, eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
    ):
        return self.evaluate(
            eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
        )

    def evaluate(
        self, eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
    ):
        return super()._evaluate(
            eval_workflow, eval_workflow_kwargs, epoch, epoch_step, global_step
        )

    # rl_trainer.py:1379 (1.0.4), :1391 (2.0.0) PPOTrainer._ensure_proxy_started
    # (agent workflows)
    def _ensure_proxy_started(self) -> None:
        return self.start_agent_proxy()

    def start_agent_proxy(self) -> None:
        return super()._ensure_proxy_started()

    # rl_trainer.py:1269 (1.0.4), :1281 (2.0.0) PPOTrainer._export_and_commit_stats
    def _export_and_commit_stats(self, epoch: int, epoch_step: int, global_step: int):
        return self.commit_step_stats(epoch, epoch_step, global_step)

    def commit_step_stats(self, epoch: int, epoch_step: int, global_step: int):
        return super()._export_and_commit_stats(epoch, epoch_step, global_step)

    # rl_trainer.py:875 (2.0.0) PPOTrainer.close begins with self.saver.finalize().
    # AReaL main's __init__ calls close() when construction fails (rl_trainer.py:121
    # at cbff54d), on a trainer that may have no saver yet: the AttributeError
    # would replace the error that stopped construction, and no worker would be
    # stopped. A half-built trainer is closed part by part instead.
    def close(self):
        if hasattr(self, "saver"):
            return super().close()
        return close_half_built(self)


# What PPOTrainer.close() destroys, in its order (rl_trainer.py:875-896, 2.0.0).
_CLOSED_PARTS = ("eval_rollout", "rollout", "teacher", "ref", "critic", "actor")


def close_half_built(trainer: Any) -> None:
    """Destroy whichever of the trainer's engines were built, then the scheduler's
    workers; each failure is logged, none raised, since the error being handled
    is construction's."""
    for name in _CLOSED_PARTS:
        part = trainer.__dict__.get(name)
        if part is None:
            continue
        try:
            part.destroy()
        except Exception as exc:  # noqa: BLE001 - construction's error is raised
            logger.warning(
                f"Closing a half-built trainer: {name}.destroy() failed: {exc!r}"
            )
    scheduler = trainer.__dict__.get("scheduler")
    if scheduler is not None:
        try:
            scheduler.delete_workers()
        except Exception as exc:  # noqa: BLE001
            logger.warning(
                f"Closing a half-built trainer: scheduler.delete_workers() failed: {exc!r}"
            )


def export_and_commit_stats(
    trainer: PPOTrainer,
    epoch: int,
    epoch_step: int,
    global_step: int,
    on_stats: Callable[[dict], None],
) -> None:
    """``PPOTrainer._export_and_commit_stats`` (rl_trainer.py:1269-1279 in 1.0.4,
    1281-1291 in 2.0.0) with ``on_stats`` called on the step's statistics just
    before they are committed."""
    import torch.distributed as dist
    from areal.infra import current_platform
    from areal.utils.environ import is_single_controller

    stats = trainer.actor.export_stats()
    stats.update(trainer.rollout.export_stats())
    if trainer.eval_rollout is not None:
        stats.update(trainer.eval_rollout.export_stats())
    on_stats(stats)
    trainer.stats_logger.commit(epoch, epoch_step, global_step, stats)
    if not is_single_controller():
        dist.barrier(group=trainer.actor.cpu_group)
        current_platform.synchronize()


def record_token_stats(scope: str, denominator: str, mask, **values) -> None:
    """Per-token statistics into AReaL's own stats tracker
    (areal/utils/stats_tracker.py: ``scope``, ``denominator``, ``stat``), so they
    are exported, reduced over data-parallel ranks (avg, min and max over the
    tokens of ``mask``) and committed with the step's statistics, and logged
    wherever AReaL logs them. ``mask`` a bool tensor, ``values`` float32 tensors
    of its shape."""
    from areal.utils import stats_tracker

    tracker = stats_tracker.get()
    with tracker.scope(scope):
        tracker.denominator(**{denominator: mask})
        tracker.stat(denominator=denominator, **values)


def record_scalars(scope: str, **values: float) -> None:
    """Numbers into AReaL's own stats tracker (``scalar``: averaged over the
    calls of a step and the data-parallel ranks), committed with the step's
    statistics like ``record_token_stats``'."""
    from areal.utils import stats_tracker

    tracker = stats_tracker.get()
    with tracker.scope(scope):
        tracker.scalar(**values)


def _trackers() -> list[Any]:
    """Every stats tracker of areal/utils/stats_tracker.py: DEFAULT_TRACKER
    (whose ``stat``/``denominator`` the loss functions call) and, where there is
    the registry (``TRACKERS``, ``get(name)``), the named ones."""
    from areal.utils import stats_tracker

    found = [stats_tracker.DEFAULT_TRACKER]
    found += list(getattr(stats_tracker, "TRACKERS", {}).values())
    return list({id(t): t for t in found}.values())


def _copied(value: Any) -> Any:
    out = copy.copy(value)
    for key, entries in out.items():
        if isinstance(entries, list):
            out[key] = list(entries)
    return out


def stats_tracker_snapshot() -> list[tuple[Any, dict[str, Any]]]:
    """What AReaL's stats trackers hold (each dict attribute: ``stats``,
    ``denominators``, ``reduce_types`` and, on main, ``reduce_groups``), for
    ``restore_stats_tracker``: the blame passes' loss statistics never reach the
    step's."""
    return [
        (t, {k: _copied(v) for k, v in vars(t).items() if isinstance(v, dict)})
        for t in _trackers()
    ]


def restore_stats_tracker(saved: list[tuple[Any, dict[str, Any]]]) -> None:
    for tracker, attributes in saved:
        for name, value in attributes.items():
            setattr(tracker, name, value)


def stats_tracker_lengths() -> dict[tuple[int, str], int]:
    """How many entries each key of each tracker holds now."""
    return {
        (id(t), key): len(entries)
        for t in _trackers()
        for key, entries in t.stats.items()
    }


# The loss functions' token masks (grpo_loss_fn's ``stats_tracker.denominator``,
# trainer/ppo/actor.py:530 in 1.0.4): what each blame pass counts of its sample.
LOSS_TOKEN_MASKS = {
    "n_valid_tokens": "loss_tokens",
    "clipped_tokens": "clipped",
    "dual_clipped_tokens": "dual_clipped",
    "unclipped_behave_tokens": "behave_kept",
}


def loss_token_counts(before: dict[tuple[int, str], int]) -> dict[str, int]:
    """The tokens of ``LOSS_TOKEN_MASKS`` the loss function counted since
    ``before`` (``stats_tracker_lengths``): its clipped, dual-clipped and
    behaviour-weight-capped tokens (loss tokens less those it kept)."""
    counts: dict[str, int] = {}
    for t in _trackers():
        for key, entries in t.stats.items():
            name = LOSS_TOKEN_MASKS.get(key.rsplit("/", 1)[-1])
            if name is None:
                continue
            for mask in entries[before.get((id(t), key), 0) :]:
                counts[name] = counts.get(name, 0) + int(mask.sum())
    if "behave_kept" in counts:
        counts["behave_capped"] = counts.get("loss_tokens", 0) - counts["behave_kept"]
    counts.pop("behave_kept", None)
    counts.pop("loss_tokens", None)
    return counts


# -- trainer state read by areal-debug -------------------------------------------------
def trains_on_cpu() -> bool:
    """areal/infra/platforms (platforms/__init__.py:93 ``current_platform``, 1.0.4
    and 2.0.0): the current platform's device is the CPU."""
    import torch
    from areal.infra import current_platform

    return torch.device(current_platform.current_device()).type == "cpu"


def cpu_group(trainer: PPOTrainer):
    """The actor's gloo group PPOTrainer itself barriers on (SPMD only)."""
    return trainer.actor.cpu_group


def train_dp_size(trainer: PPOTrainer) -> int:
    """Training data-parallel size of the actor's allocation (rl_trainer.py:132
    in 1.0.4 and 2.0.0)."""
    return trainer.actor_alloc.parallel.dp_size


def train_world_size(trainer: PPOTrainer) -> int:
    return trainer.actor_alloc.parallel.world_size


def rollout_dp_size(trainer: PPOTrainer) -> int:
    return trainer.rollout_alloc.parallel.dp_size


def rollout_backend(trainer: PPOTrainer) -> str:
    return trainer.rollout_alloc.backend


def online_mode(trainer: PPOTrainer) -> bool:
    """rl_trainer.py:154 (1.0.4 and 2.0.0) ``_online_mode``
    (``rollout.agent.mode: online``): the trainer built its own
    ``_EmptyDataLoader`` (rl_trainer.py:202-219 in 1.0.4 and 2.0.0), not through
    ``_create_dataloader``."""
    return bool(trainer._online_mode)


def teacher_dp_size(trainer: PPOTrainer) -> int:
    """rl_trainer.py:183-198 (1.0.4 and 2.0.0) ``teacher_alloc``, from
    ``teacher.rollout.backend``."""
    return trainer.teacher_alloc.parallel.dp_size


def teacher_backend(trainer: PPOTrainer) -> str:
    return trainer.teacher_alloc.backend


# What the trainer hands a step's collected batch to first: the step's batch is
# complete from the first of these calls on (rl_trainer.py's order).
_BATCH_USES = {
    "actor": ("compute_logp", "compute_advantages", "prepare_mopd_batch", "ppo_update"),
    "critic": ("compute_values",),
    "ref": ("compute_logp",),
}


def collects_in_several_calls() -> bool:
    """AReaL after main @cbff54d (#1563): PPOTrainer.train collects a step's batch
    with ``_collect_trainable_rollout_batch``, which may call ``prepare_batch``
    several times; earlier builds call it once a step. Detected by the helper's
    presence, not a version."""
    from areal.trainer import rl_trainer

    return hasattr(rl_trainer, "_collect_trainable_rollout_batch")


def batch_users(trainer: PPOTrainer) -> list[tuple[Any, str]]:
    """``(engine, method)`` of the trainer's engines that take a step's batch
    first (``_BATCH_USES``), those it has."""
    found = []
    for role, methods in _BATCH_USES.items():
        engine = getattr(trainer, role, None)
        found += [(engine, m) for m in methods if hasattr(engine, m)]
    return found
