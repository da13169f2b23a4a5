# SPDX-License-Identifier: Apache-2.0
"""An AReaL RLVR (GRPO) training script with areal-debug: two lines differ from
AReaL's own examples (``load_expr_config`` and the trainer class come from
``areal_debug``; the config class stays AReaL's).

Record (CPU server from `python -m areal_debug.tooling.cpu_server` running):
    AREAL_SPMD_MODE=1 AREAL_LLM_SERVER_ADDRS=127.0.0.1:PORT \\
      torchrun --nproc-per-node 1 examples/rlvr_debug.py --config configs/tiny_cpu.yaml \\
      debug.dump_rollout_data=true
Replay (no server):
    AREAL_SPMD_MODE=1 torchrun --nproc-per-node 1 examples/rlvr_debug.py \\
      --config configs/tiny_cpu.yaml debug.replay_rollout_data=true
Single-controller mode (scheduler.type: local): see configs/tiny_cpu_sc.yaml.
"""

import sys

from areal.api.cli_args import GRPOConfig

from areal_debug import DebugPPOTrainer, load_expr_config
from areal_debug.tooling.tiny_task import build_tiny_model, load_dataset


def main(args):
    config, _ = load_expr_config(args, GRPOConfig)
    # The tiny model is built offline on first use; a real run points actor.path
    # at its own model and drops this line.
    build_tiny_model(config.actor.path)
    # Replay never reads the dataset.
    train_dataset = (
        None
        if config.debug.replay_rollout_data
        else load_dataset(config.train_dataset.path)
    )
    # Import paths, not objects: in single-controller mode the rollout workers
    # build the workflow themselves (SPMD accepts both forms).
    workflow_kwargs = dict(
        reward_fn="areal_debug.tooling.tiny_task.arithmetic_reward",
        gconfig=config.gconfig,
        tokenizer=config.tokenizer_path,
    )
    with DebugPPOTrainer(config, train_dataset=train_dataset) as trainer:
        trainer.train(
            "areal.workflow.rlvr.RLVRWorkflow", workflow_kwargs=workflow_kwargs
        )


if __name__ == "__main__":
    main(sys.argv[1:])
