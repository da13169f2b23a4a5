# SPDX-License-Identifier: Apache-2.0
"""ReplayPlan: the steps a replay runs, as the replay and ``areal-debug doctor`` see them."""

import os
from types import SimpleNamespace

import pytest

from areal_debug.recording.format import KEPT, step_dirname
from areal_debug.replay_plan import ReplayPlan, needs_teacher_servers


@pytest.fixture
def recording(tmp_path):
    # Recover checkpoints kept after steps 2 and 5.
    for step in (2, 5):
        os.makedirs(tmp_path / KEPT / step_dirname(step))
    return str(tmp_path)


def test_no_start_step_replays_from_zero_without_a_checkpoint(recording):
    plan = ReplayPlan.of(recording, None, None, None)
    assert (plan.start_step, plan.checkpoint, plan.first_step) == (0, None, 0)
    assert plan.recover_mode == "disabled" and plan.total_train_steps is None


@pytest.mark.parametrize(
    "start, checkpoint, first",
    [(3, 2, 3), (5, 2, 3), (6, 5, 6), (9, 5, 6), (2, None, 0)],
)
def test_start_restores_the_latest_checkpoint_before_it(
    recording, start, checkpoint, first
):
    plan = ReplayPlan.of(recording, start, None, None)
    assert (plan.checkpoint, plan.first_step) == (checkpoint, first)
    assert plan.rebuilt_steps == range(first, start)
    assert plan.recover_mode == ("on" if checkpoint is not None else "disabled")


@pytest.mark.parametrize(
    "end, total, last", [(4, None, 4), (None, 7, 6), (4, 7, 4), (9, 7, 6)]
)
def test_the_earlier_of_end_step_and_total_train_steps_ends_it(
    recording, end, total, last
):
    plan = ReplayPlan.of(recording, None, end, total)
    assert plan.last_step == last and plan.total_train_steps == last + 1


def test_stop_is_the_training_loop_end_or_the_last_step(recording):
    # AReaL's loop: epochs x steps per epoch, cut at total_train_steps.
    assert ReplayPlan.of(recording, None, None, None).stop(2, 3) == 6
    assert ReplayPlan.of(recording, None, 3, None).stop(2, 3) == 4
    assert ReplayPlan.of(recording, None, 10, None).stop(2, 3) == 6


def test_a_served_teacher_needs_recorded_log_probs():
    served = SimpleNamespace(teacher=SimpleNamespace(engine_type="rollout"))
    trained = SimpleNamespace(teacher=SimpleNamespace(engine_type="train"))
    recorded = SimpleNamespace(recorded_teacher_logp=True)
    missing = SimpleNamespace(recorded_teacher_logp=False)
    assert needs_teacher_servers(served, missing)
    assert not needs_teacher_servers(served, recorded)
    assert not needs_teacher_servers(trained, missing)
    assert not needs_teacher_servers(SimpleNamespace(teacher=None), missing)
