# SPDX-License-Identifier: Apache-2.0
"""Runs a replay cannot make inference-free are refused with one clear message."""

from types import SimpleNamespace

import pytest

from areal_debug.modes.replay_setup import UnsupportedReplayError, refuse_unsupported
from areal_debug.recording.manifest import Layout, Manifest


def config(teacher=None):
    return SimpleNamespace(teacher=teacher)


def manifest(teacher_logp: bool = False) -> Manifest:
    layout = Layout(num_shards=1, steps_per_epoch=1)
    return Manifest(1, "e", "t", layout, recorded_teacher_logp=teacher_logp)


ROLLOUT_TEACHER = SimpleNamespace(engine_type="rollout")


def test_a_served_teacher_without_recorded_log_probs_is_refused():
    with pytest.raises(UnsupportedReplayError, match="teacher.engine_type=train"):
        refuse_unsupported(config(teacher=ROLLOUT_TEACHER), manifest())


def test_a_served_teacher_with_recorded_log_probs_replays():
    refuse_unsupported(config(teacher=ROLLOUT_TEACHER), manifest(teacher_logp=True))


def test_a_teacher_on_the_training_side_or_none_replays():
    # A training-side teacher computes its log-probs in the replay as in the dump.
    # (Agent and online runs replay too: tests/test_agent_workflows.py runs them.)
    refuse_unsupported(config(teacher=SimpleNamespace(engine_type="train")), manifest())
    refuse_unsupported(config(), manifest())


def test_the_teacher_flag_round_trips_and_is_type_checked():
    data = manifest(teacher_logp=True).to_json()
    assert Manifest.from_json(data).recorded_teacher_logp is True
    del data["recorded_teacher_logp"]  # recordings made before the flag existed
    assert Manifest.from_json(data).recorded_teacher_logp is False
    with pytest.raises(ValueError, match="recorded_teacher_logp"):
        Manifest.from_json({**data, "recorded_teacher_logp": "yes"})
