# SPDX-License-Identifier: Apache-2.0
"""Shaped like AReaL 1.0.4's examples/openclaw/train.py: online mode
(``rollout.agent.mode: online``), no dataset and no workflow: in a real run,
clients send their trajectories through AReaL's proxy gateway. The two
areal-debug lines are the loader and the trainer class.

    python tests/scripts/online_rl.py --config tests/scripts/online_cpu.yaml \\
        debug.replay_rollout_data=true
"""

import sys

from areal.api.cli_args import PPOConfig

from areal_debug import DebugPPOTrainer, load_expr_config


def main(args):
    config, _ = load_expr_config(args, PPOConfig)
    with DebugPPOTrainer(config) as trainer:
        trainer.train()


if __name__ == "__main__":
    main(sys.argv[1:])
