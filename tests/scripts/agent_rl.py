# SPDX-License-Identifier: Apache-2.0
"""Shaped like AReaL 1.0.4's examples/agent_workflow/train.py, with areal-debug's change.

An agent class (not a ``RolloutWorkflow``) named in the config: AReaL starts its
proxy next to the rollout workers and the agent talks to the model through it
(``rollout.agent.mode: inline``). The config class with the workflow fields lives
in the script. The areal-debug change is the loader and the trainer class.

    PYTHONPATH=tests/scripts AREAL_LLM_SERVER_ADDRS=host:port \\
    python tests/scripts/agent_rl.py --config tests/scripts/gsm8k_agent_cpu.yaml \\
        debug.dump_rollout_data=true
"""

import sys
from dataclasses import dataclass, field

from areal.api.cli_args import PPOConfig
from areal.dataset import get_custom_dataset
from areal.utils.hf_utils import load_hf_tokenizer

from areal_debug import DebugPPOTrainer, load_expr_config


@dataclass
class AgentConfig(PPOConfig):
    """The workflow classes and the agent's own settings."""

    workflow: str = field(
        default="gsm8k_agent.Gsm8kAgent",
        metadata={"help": "Import path of the agent class for training."},
    )
    eval_workflow: str = field(
        default="gsm8k_agent.Gsm8kAgent",
        metadata={"help": "Import path of the agent class for evaluation."},
    )
    max_turns: int = field(default=1, metadata={"help": "Turns per trajectory."})


def main(args):
    config, _ = load_expr_config(args, AgentConfig)
    tokenizer = load_hf_tokenizer(config.tokenizer_path)
    train_dataset = get_custom_dataset(
        split="train", dataset_config=config.train_dataset, tokenizer=tokenizer
    )
    valid_dataset = get_custom_dataset(
        split="test", dataset_config=config.valid_dataset, tokenizer=tokenizer
    )
    workflow_kwargs = dict(
        temperature=config.gconfig.temperature,
        max_completion_tokens=config.gconfig.max_new_tokens,
        max_turns=config.max_turns,
    )
    with DebugPPOTrainer(
        config, train_dataset=train_dataset, valid_dataset=valid_dataset
    ) as trainer:
        trainer.train(
            workflow=config.workflow,
            eval_workflow=config.eval_workflow,
            workflow_kwargs=workflow_kwargs,
            eval_workflow_kwargs=dict(workflow_kwargs, temperature=0.6),
        )


if __name__ == "__main__":
    main(sys.argv[1:])
