# SPDX-License-Identifier: Apache-2.0
"""Runs a replay cannot make inference-free yet are refused with one clear message."""

from types import SimpleNamespace

import pytest

from areal_debug.modes.replay import UnsupportedReplayError, _refuse_unsupported


def config(teacher=None, agent_mode=None):
    agent = SimpleNamespace(mode=agent_mode) if agent_mode else None
    return SimpleNamespace(teacher=teacher, rollout=SimpleNamespace(agent=agent))


def test_a_teacher_served_as_an_inference_engine_is_refused():
    with pytest.raises(UnsupportedReplayError, match="teacher.engine_type=train"):
        _refuse_unsupported(config(teacher=SimpleNamespace(engine_type="rollout")))


def test_online_mode_is_refused():
    with pytest.raises(UnsupportedReplayError, match="rollout.agent.mode=inline"):
        _refuse_unsupported(config(agent_mode="online"))


def test_inline_agents_and_training_side_teachers_pass():
    _refuse_unsupported(config(teacher=SimpleNamespace(engine_type="train")))
    _refuse_unsupported(config(agent_mode="inline"))
    _refuse_unsupported(config())
