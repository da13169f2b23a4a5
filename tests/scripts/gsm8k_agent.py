# SPDX-License-Identifier: Apache-2.0
"""An agent class shaped like AReaL 1.0.4's ``areal.workflow.openai.math_agent``.

A plain class with ``async def run(self, data, **extra_kwargs)``: it talks to the
model through an OpenAI client pointed at AReaL's proxy (``base_url``, ``api_key``
and ``http_client`` come from the proxy) and returns the reward. AReaL then exports
the completions the proxy saw as the trajectories the actor trains on. It lives in
its own module, as AReaL requires: the proxy workers import it by name.
"""

import re

from openai import AsyncOpenAI


def gsm8k_reward(completion: str | None, answer: str) -> float:
    """1.0 when the last number in the completion is gsm8k's answer."""
    # math-verify's parse uses signal.alarm, which the proxy's threads cannot.
    numbers = re.findall(r"-?\d+", completion or "")
    return float(bool(numbers) and numbers[-1] == answer.split("####")[-1].strip())


class Gsm8kAgent:
    """One chat completion per question, rewarded with math-verify."""

    def __init__(self, **kwargs):
        self.kwargs = {k: v for k, v in kwargs.items() if k not in ("max_turns",)}

    async def run(self, data: dict, **extra_kwargs) -> float:
        client = AsyncOpenAI(
            base_url=extra_kwargs.get("base_url"),
            api_key=extra_kwargs.get("api_key"),
            http_client=extra_kwargs.get("http_client"),
            max_retries=0,
        )
        comp = await client.chat.completions.create(
            messages=data["messages"], model="default", **self.kwargs
        )
        return gsm8k_reward(comp.choices[0].message.content, data["answer"])
