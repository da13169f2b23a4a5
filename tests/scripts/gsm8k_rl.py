# SPDX-License-Identifier: Apache-2.0
"""Shaped like AReaL 1.0.4's examples/math/gsm8k_rl.py, with areal-debug's change.

What AReaL's own example scripts do, in one script: datasets from
``get_custom_dataset`` (in single-controller mode an ``RDataset`` served by
AReaL's data service), an import-path RLVR workflow with AReaL's gsm8k reward and
an evaluation workflow, a config subclass with an extra field defined in the
script itself (8 of AReaL's 16 example scripts have one; this one lives in
``__main__``), and the user's own ``PPOTrainer`` subclass. The change for
areal-debug is the import of ``load_expr_config`` and the trainer class; the
script is the same in dump, replay and with debug off.

    python tests/scripts/gsm8k_rl.py --config tests/scripts/gsm8k_grpo_cpu.yaml \
        debug.dump_rollout_data=true
"""

import sys
from dataclasses import dataclass, field

from areal import PPOTrainer
from areal.api.cli_args import GRPOConfig
from areal.dataset import get_custom_dataset
from areal.utils import logging
from areal.utils.hf_utils import load_hf_tokenizer

from areal_debug import DebugPPOTrainer, load_expr_config

logger = logging.getLogger("Gsm8kScript")


@dataclass
class Gsm8kConfig(GRPOConfig):
    """An experiment config with a field of the script's own."""

    export_style: str = field(
        default="concat", metadata={"help": "How trajectories are exported."}
    )


class ScriptTrainer(PPOTrainer):
    """The user's own trainer subclass; areal-debug composes with it."""

    def train(self, *args, **kwargs):
        logger.info(f"ScriptTrainer.train (export_style={self.config.export_style})")
        return super().train(*args, **kwargs)


class DebugScriptTrainer(DebugPPOTrainer, ScriptTrainer):
    pass


def main(args):
    config, _ = load_expr_config(args, Gsm8kConfig)
    tokenizer = load_hf_tokenizer(config.tokenizer_path)
    train_dataset = get_custom_dataset(
        split="train", dataset_config=config.train_dataset, tokenizer=tokenizer
    )
    valid_dataset = get_custom_dataset(
        split="test", dataset_config=config.valid_dataset, tokenizer=tokenizer
    )
    workflow_kwargs = dict(
        reward_fn="areal.reward.gsm8k.gsm8k_reward_fn",
        gconfig=config.gconfig,
        tokenizer=config.tokenizer_path,
        enable_thinking=False,
    )
    eval_workflow_kwargs = workflow_kwargs.copy()
    eval_workflow_kwargs["gconfig"] = config.gconfig.new(temperature=0.6)
    with DebugScriptTrainer(
        config, train_dataset=train_dataset, valid_dataset=valid_dataset
    ) as trainer:
        trainer.train(
            workflow="areal.workflow.rlvr.RLVRWorkflow",
            workflow_kwargs=workflow_kwargs,
            eval_workflow="areal.workflow.rlvr.RLVRWorkflow",
            eval_workflow_kwargs=eval_workflow_kwargs,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
