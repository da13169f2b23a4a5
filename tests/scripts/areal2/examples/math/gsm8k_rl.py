# AReaL 2.0.0's examples/math/gsm8k_rl.py (github.com/areal-project/AReaL, tag
# v2.0.0, Apache-2.0) with areal-debug's two-line change (the lines marked
# "areal-debug"): load_expr_config from areal_debug, DebugPPOTrainer for PPOTrainer.
#   python examples/math/gsm8k_rl.py --config cpu/gsm8k_grpo_cpu.yaml \
#       debug.dump_rollout_data=true      # or debug.replay_rollout_data=true
import sys

from areal.api.cli_args import GRPOConfig
from areal.dataset import get_custom_dataset
from areal.utils.hf_utils import load_hf_tokenizer

from areal_debug import DebugPPOTrainer, load_expr_config  # areal-debug


def main(args):
    config, _ = load_expr_config(args, GRPOConfig)
    tokenizer = load_hf_tokenizer(config.tokenizer_path)

    train_dataset = get_custom_dataset(
        split="train",
        dataset_config=config.train_dataset,
        tokenizer=tokenizer,
    )
    valid_dataset = get_custom_dataset(
        split="test",
        dataset_config=config.valid_dataset,
        tokenizer=tokenizer,
    )

    workflow_kwargs = dict(
        temperature=config.gconfig.temperature,
        top_p=config.gconfig.top_p,
        max_tokens=config.gconfig.max_tokens,
        max_completion_tokens=config.gconfig.max_new_tokens,
    )
    eval_workflow_kwargs = workflow_kwargs.copy()
    eval_workflow_kwargs["temperature"] = 0.6

    with DebugPPOTrainer(  # areal-debug: was PPOTrainer
        config,
        train_dataset=train_dataset,
        valid_dataset=valid_dataset,
    ) as trainer:
        trainer.train(
            workflow="areal.workflow.openai.math_agent.MathAgent",
            workflow_kwargs=workflow_kwargs,
            eval_workflow="areal.workflow.openai.math_agent.MathAgent",
            eval_workflow_kwargs=eval_workflow_kwargs,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
