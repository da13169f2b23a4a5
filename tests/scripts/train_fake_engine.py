# SPDX-License-Identifier: Apache-2.0
"""AReaL training entry script used by the tests: DebugPPOTrainer with the
fake inference engine in the dump run. Usage (under torchrun):

    train_fake_engine.py --config tests/configs/tiny_fake.yaml [key=value ...]

Environment: AREAL_DEBUG_TEST_TRAINER=plain uses AReaL's PPOTrainer instead;
AREAL_DEBUG_TEST_STATS=<file> appends every committed stats dict as JSON;
AREAL_DEBUG_TEST_RENAME_HOOK=old:new renames PPOTrainer.<old> as an AReaL that
renamed it would (tests/support/renamed_hook.py).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch.distributed as dist  # noqa: E402
from areal.engine import RemoteSGLangEngine, RemotevLLMEngine  # noqa: E402
from areal.trainer.rl_trainer import PPOTrainer  # noqa: E402
from areal.workflow.rlvr import RLVRWorkflow  # noqa: E402
from support.fake_engine import FORBID_ENV, FakeRolloutEngine  # noqa: E402
from support.renamed_hook import apply_from_env  # noqa: E402

from areal_debug import DebugPPOConfig, DebugPPOTrainer, load_expr_config  # noqa: E402
from areal_debug.tooling.tiny_task import (  # noqa: E402
    arithmetic_reward,
    build_tiny_model,
    load_dataset,
)


class FakeEngineTrainer(PPOTrainer):
    def _init_rollout(self, rollout_config, is_eval=False, lora_path=None):
        if is_eval:
            return None
        engine = FakeRolloutEngine(
            self.tokenizer,
            self.config.gconfig.n_samples,
            self.config.seed,
            int(os.environ.get("RANK", "0")),
        )
        engine.initialize()
        return engine


class ScriptTrainer(DebugPPOTrainer, FakeEngineTrainer):
    pass


def _forbid(*args, **kwargs):
    raise AssertionError("an inference engine was constructed during replay")


def main(argv):
    apply_from_env()  # AREAL_DEBUG_TEST_RENAME_HOOK: an AReaL that renamed a hook
    config, _ = load_expr_config(argv, DebugPPOConfig)
    if config.debug.replay_rollout_data:
        os.environ[FORBID_ENV] = "1"
        os.environ.pop("AREAL_LLM_SERVER_ADDRS", None)
        RemoteSGLangEngine.__init__ = _forbid
        RemotevLLMEngine.__init__ = _forbid
    build_tiny_model(config.actor.path)
    dataset = (
        None
        if config.debug.replay_rollout_data
        else load_dataset(config.train_dataset.path)
    )
    plain = os.environ.get("AREAL_DEBUG_TEST_TRAINER") == "plain"
    trainer_cls = FakeEngineTrainer if plain else ScriptTrainer
    if dataset is None and plain:
        raise SystemExit("the plain trainer needs a dataset")
    workflow = RLVRWorkflow(
        reward_fn=arithmetic_reward,
        gconfig=config.gconfig,
        tokenizer=config.tokenizer_path,
    )
    with trainer_cls(config, train_dataset=dataset) as trainer:
        stats_file = os.environ.get("AREAL_DEBUG_TEST_STATS")
        if stats_file:
            commit = trainer.stats_logger.commit

            def capture(epoch, step, global_step, data):
                if dist.get_rank() == 0:
                    with open(stats_file, "a") as f:
                        f.write(
                            json.dumps({"global_step": global_step, "stats": data})
                            + "\n"
                        )
                return commit(epoch, step, global_step, data)

            trainer.stats_logger.commit = capture
        trainer.train(workflow)


if __name__ == "__main__":
    main(sys.argv[1:])
