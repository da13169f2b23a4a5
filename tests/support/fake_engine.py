# SPDX-License-Identifier: Apache-2.0
"""Test double for AReaL's inference engine, at the engine interface.

SGLang cannot run on these machines. This double does what RemoteSGLangEngine
does from the trainer's point of view: it reads prompts from the trainer's own
dataloader, "samples" completions (seeded, no model), scores them with the
real reward function and returns RLVR-format trajectories from prepare_batch.
Everything around it (FSDP actor, PPOTrainer loop, redistribution) is AReaL's.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Future
from types import SimpleNamespace

import torch
from areal.utils.data import concat_padded_tensors, cycle_dataloader
from areal.workflow.rlvr import default_get_input_ids_fn

from areal_debug.tooling.tiny_task import arithmetic_reward

FORBID_ENV = "AREAL_DEBUG_TEST_FORBID_ENGINE"
# An injected anomaly: the rewards of this step (a fresh run's Nth batch) are
# shifted by -5, which the arithmetic reward (0 or 1) never gives; within a
# group they still differ, so the step still trains.
BAD_REWARD_STEP_ENV = "AREAL_DEBUG_TEST_BAD_REWARD_STEP"
# An injected engine failure, "STEP:RANK": while a fresh run's STEPth batch is
# prepared, the data-parallel head of that rank sends one request its engine
# fails on, as AReaL main's engine refuses a non-finite log-prob; the request's
# rollout is rejected and the batch is filled without it, as AReaL's workflow
# executor does.
FAILED_REQUEST_ENV = "AREAL_DEBUG_TEST_FAILED_REQUEST"
FAILED_REQUEST_ERROR = "Malformed generation result: a planted engine failure"
# An injected NaN reward, "STEP:GROUP/SAMPLE": in a fresh run's STEPth batch, that
# sample of that group (the prompt's trajectory) scores NaN, as a broken reward
# function would; AReaL's group normalisation then makes the whole group's
# advantages NaN (tests/test_blame.py traces it back to the one sample).
NAN_REWARD_ENV = "AREAL_DEBUG_TEST_NAN_REWARD"


class FakeRolloutEngine:
    constructed = 0

    def __init__(self, tokenizer, n_samples: int, seed: int, rank: int):
        if os.environ.get(FORBID_ENV) == "1":
            raise AssertionError("the inference engine was constructed during replay")
        FakeRolloutEngine.constructed += 1
        self.tokenizer = tokenizer
        self.n_samples = n_samples
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank)
        self._data = None
        self._version = 0
        self._batches = 0
        bad = os.environ.get(BAD_REWARD_STEP_ENV)
        self._bad_step = None if bad is None else int(bad)
        failed = os.environ.get(FAILED_REQUEST_ENV, "").split(":")
        self._failed_request_step = (
            int(failed[0]) if len(failed) == 2 and int(failed[1]) == rank else None
        )
        nan = os.environ.get(NAN_REWARD_ENV)
        self._nan_reward = None
        if nan:
            step, place = nan.split(":")
            group, sample = place.split("/")
            self._nan_reward = (int(step), int(group), int(sample))
        self.digit_ids = [tokenizer.convert_tokens_to_ids(str(d)) for d in range(19)]
        self.eos = tokenizer.eos_token_id
        # A resumed PPOTrainer syncs the executor's staleness manager (none here);
        # the workflows' requests go to the executor's inference engine.
        self.workflow_executor = SimpleNamespace(
            staleness_manager=None, inference_engine=self
        )

    async def agenerate(self, req):
        """A request the engine fails on (the only one this double sends)."""
        raise ValueError(FAILED_REQUEST_ERROR)

    def _fail_one_request(self) -> None:
        # Called as a workflow does, through the executor's engine: the
        # exception is logged and the rollout rejected, as AReaL's executor does.
        try:
            asyncio.run(self.workflow_executor.inference_engine.agenerate(None))
        except ValueError:
            pass

    def _sample(self, prompt_ids: list[int], answer: str) -> dict:
        n = int(torch.randint(1, 6, (1,), generator=self.gen))
        picks = torch.randint(0, len(self.digit_ids), (n,), generator=self.gen)
        out = [self.digit_ids[i] for i in picks.tolist()] + [self.eos]
        text = self.tokenizer.decode(out)
        reward = arithmetic_reward(None, text, prompt_ids, out, answer)
        ids = prompt_ids + out
        L, P = len(ids), len(prompt_ids)
        logprobs = -torch.rand(L, generator=self.gen) * 3.0
        logprobs[:P] = 0.0
        versions = torch.full((L,), self._version, dtype=torch.int32)
        versions[:P] = -1
        return {
            "input_ids": torch.tensor(ids, dtype=torch.int32).unsqueeze(0),
            "loss_mask": torch.tensor(
                [0] * P + [1] * len(out), dtype=torch.int32
            ).unsqueeze(0),
            "logprobs": logprobs.to(torch.float32).unsqueeze(0),
            "versions": versions.unsqueeze(0),
            "attention_mask": torch.ones(1, L, dtype=torch.bool),
            "rewards": torch.tensor([reward], dtype=torch.float32),
        }

    def prepare_batch(
        self,
        dataloader,
        workflow=None,
        workflow_kwargs=None,
        should_accept_fn=None,
        group_size=1,
        dynamic_bs=False,
        **kwargs,
    ):
        # AReaL main also passes reward_normalization= and drop_incomplete_group=
        # (#1516); the fake engine's rewards are raw, as with normalisation off.
        if self._data is None:
            self._data = cycle_dataloader(dataloader)
        batch = []
        for item in next(self._data):
            # The same prompt encoding RLVRWorkflow uses.
            prompt_ids = default_get_input_ids_fn(
                item["messages"], self.tokenizer, False
            )
            group = [
                self._sample(list(prompt_ids), item["answer"])
                for _ in range(group_size)
            ]
            batch.append(concat_padded_tensors(group))
        if self._batches == self._failed_request_step:
            self._fail_one_request()
        if self._batches == self._bad_step:
            for traj in batch:
                traj["rewards"] = traj["rewards"] - 5.0
        if self._nan_reward is not None and self._nan_reward[0] == self._batches:
            _, group, sample = self._nan_reward
            batch[group]["rewards"][sample] = float("nan")
        self._batches += 1
        return batch

    def initialize(self, *a, **k):
        pass

    def destroy(self):
        pass

    def pause(self):
        pass

    def resume(self):
        pass

    def pause_generation(self):
        pass

    def continue_generation(self):
        pass

    def set_version(self, v):
        self._version = v

    def get_version(self):
        return self._version

    def export_stats(self):
        return {}

    def save_perf_tracer(self, *a, **k):
        pass

    def config_perf_tracer(self, *a, **k):
        pass

    def update_weights_from_disk(self, meta):
        fut = Future()
        fut.set_result(None)
        return fut
