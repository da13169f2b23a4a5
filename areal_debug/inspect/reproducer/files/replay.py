# SPDX-License-Identifier: Apache-2.0
"""Replays the extracted recording: AReaL's PPO trainer, no dataset, no inference.

Written by ``areal-debug extract``; the same file for every extract (package data,
no recorded text in it). Usage (the test beside it runs it):
    torchrun --nproc-per-node N replay.py --config CONFIG.yaml
"""

import sys

from areal.api.cli_args import GRPOConfig

from areal_debug import DebugPPOTrainer, load_expr_config

if __name__ == "__main__":
    config, _ = load_expr_config(sys.argv[1:], GRPOConfig)
    # Replay mode reads no dataset and runs no workflow: the recording stands in.
    with DebugPPOTrainer(config, train_dataset=None) as trainer:
        trainer.train(None)
