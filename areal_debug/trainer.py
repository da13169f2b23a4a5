# SPDX-License-Identifier: Apache-2.0
"""DebugPPOTrainer: AReaL's PPOTrainer with rollout recording and replay.

A training script changes two lines (config class, trainer class). The trainer
is a list of AReaL's hooks, each handed to one mode object chosen at start:
off (AReaL's own code at every hook, nothing installed), dump (the inference
engine's batches are recorded) or replay (a replay engine stands in for the
inference engine and the statistics are compared with the recording).
AReaL's private hook names are mapped to these in ``areal_compat.TrainerHooks``.
"""

from __future__ import annotations

from areal_debug.areal_compat import (
    TRAINER_HOOKS,
    TrainerHooks,
    check_areal_version,
    check_seams_at_start,
)
from areal_debug.compare.replay import DivergenceStop
from areal_debug.config import DebugConfig, debug_config_of
from areal_debug.lossless_resume import lossless_resume
from areal_debug.modes import DebugMode, choose_mode


class DebugPPOTrainer(TrainerHooks):
    def __init__(self, config, train_dataset=None, valid_dataset=None):
        check_areal_version(hooks=TRAINER_HOOKS)
        self.debug: DebugConfig = debug_config_of(config)
        # Every seam, whatever the version says: a renamed hook is named here
        # with what it fed, not left as dead code.
        self.missing_seams = check_seams_at_start(self.debug.require_all_seams)
        self.debug_mode: DebugMode = choose_mode(self, self.debug)
        # debug.lossless_resume: with or without recording, beside the mode.
        self.lossless_resume = lossless_resume(self, self.debug)
        if self.lossless_resume is not None:
            self.lossless_resume.prepare(config)
        train_dataset, valid_dataset = self.debug_mode.prepare(
            config, train_dataset, valid_dataset
        )
        try:
            super().__init__(config, train_dataset, valid_dataset)
        except BaseException:
            self.debug_mode.failed_init()
            raise
        self.debug_mode.started()
        if self.lossless_resume is not None:
            try:
                self.lossless_resume.started()
            except BaseException:
                self.close()
                raise

    def build_scheduler(self):
        return self.debug_mode.build_scheduler(super().build_scheduler)

    def build_dataloader(self, dataset, dataset_config, rank, world_size):
        loader = self.debug_mode.build_dataloader(
            super().build_dataloader, dataset, dataset_config, rank, world_size
        )
        if self.lossless_resume is not None:
            loader = self.lossless_resume.build_dataloader(loader, dataset_config)
        return loader

    def build_train_engine(self, actor_config, alloc):
        return self.debug_mode.build_train_engine(
            super().build_train_engine, actor_config, alloc
        )

    def build_critic(self, critic_config, alloc):
        return self.debug_mode.build_critic(super().build_critic, critic_config, alloc)

    def build_inference_engine(self, rollout_config, is_eval=False, lora_path=None):
        return self.debug_mode.build_inference_engine(
            super().build_inference_engine, rollout_config, is_eval, lora_path
        )

    def build_teacher_engine(self, rollout_config):
        return self.debug_mode.build_teacher_engine(
            super().build_teacher_engine, rollout_config
        )

    def save_recover_checkpoint(self, epoch, epoch_step, global_step):
        return self.debug_mode.save_recover_checkpoint(
            super().save_recover_checkpoint, epoch, epoch_step, global_step
        )

    def evaluate(self, eval_workflow, eval_workflow_kwargs, epoch, epoch_step, step):
        return self.debug_mode.evaluate(
            super().evaluate,
            eval_workflow,
            eval_workflow_kwargs,
            epoch,
            epoch_step,
            step,
        )

    def start_agent_proxy(self):
        return self.debug_mode.start_agent_proxy(super().start_agent_proxy)

    def commit_step_stats(self, epoch, epoch_step, global_step):
        return self.debug_mode.commit_step_stats(
            super().commit_step_stats, epoch, epoch_step, global_step
        )

    def train(self, workflow=None, eval_workflow=None, *args, **kwargs):
        return self.debug_mode.train(
            super().train, workflow, eval_workflow, *args, **kwargs
        )

    def close(self):
        # AReaL main closes a trainer whose construction failed: maybe before
        # this was set.
        lossless = getattr(self, "lossless_resume", None)
        if lossless is not None:
            lossless.close()
        return self.debug_mode.close(super().close)

    def __exit__(self, exc_type, exc_value, traceback):
        # debug.fail_on_divergence: the reason is logged once already; AReaL's own
        # exit would log it again with a traceback ("Training failed with ...").
        if isinstance(exc_value, DivergenceStop):
            self.close()
            return False
        return super().__exit__(exc_type, exc_value, traceback)
