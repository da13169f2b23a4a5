# SPDX-License-Identifier: Apache-2.0
"""AReaL after main @cbff54d, which no installable build has: stand-ins built from
upstream's own newer files (read through the search index's file versions;
../shared/areal-after-cbff54d.md), each test naming the file it follows. The real
builds are the CI legs."""

from __future__ import annotations

import inspect

from areal_debug.modes.engines import ReplayEngine

# areal/trainer/rl_trainer.py after #1738 (the index's 89,804-character version; it
# records no commit): what PPOTrainer.train calls on self.rollout around a step
# with v1 AWEX colocation, in its order. Before auxiliary scoring
# (train, "elif self._is_v1_awex_colocate(self.config)"), in
# _update_weights_and_publish_version, and in _restore_awex_rollout_after_stats;
# _offload_rollout calls offload() with no tags.
AWEX_STEP = [
    ("pause", (), {}),
    ("pause_generation_sync", (), {}),
    ("offload", (), {"tags": ["kv_cache"]}),
    ("offload", (), {"tags": ["weights"]}),
    ("offload", (), {"tags": ["cuda_graph"]}),
    ("offload", (), {}),
    ("set_version", (1,), {}),
    ("abort_all_requests", (), {}),
    ("onload", (), {"tags": ["cuda_graph"]}),
    ("onload", (), {"tags": ["kv_cache"]}),
    ("continue_generation", (), {}),
    ("export_stats", (), {}),
    ("clear_batches", (), {}),
    ("enable_mopd_routing", (), {}),
    ("resume", (), {}),
]


def test_the_replay_engine_takes_the_awex_hand_off_of_a_step():
    engine = ReplayEngine(loader=None)
    for name, args, kwargs in AWEX_STEP:
        # Its own method, not the __getattr__ that refuses unknown names.
        assert inspect.getattr_static(ReplayEngine, name, None) is not None, name
        result = getattr(engine, name)(*args, **kwargs)
        assert result is None or isinstance(result, dict), (name, result)
    assert engine.get_version() == 1


def test_prepare_batch_takes_the_keywords_after_cbff54d():
    """#1563 (areal/api/engine_api.py): prepare_batch(..., min_usable_group_size=1,
    reward_normalization_use_std=True); main @cbff54d adds reward_normalization and
    drop_incomplete_group. The replay engine's signature binds them all."""
    signature = inspect.signature(ReplayEngine.prepare_batch)
    signature.bind(
        ReplayEngine(loader=None),
        None,
        workflow=None,
        min_usable_group_size=1,
        reward_normalization_use_std=True,
        reward_normalization=None,
        drop_incomplete_group=False,
    )


def test_an_evaluation_before_training_is_neither_a_step_nor_a_divergence():
    """#1636 (areal/trainer/rl_trainer.py, eval_before_train): the evaluation's
    statistics are committed at epoch, epoch step and global step -1 before the
    first step. AReaL's commit runs; nothing is recorded or compared, and the
    step clock is not moved."""
    from areal_debug.config import DebugConfig
    from areal_debug.modes.base import ActiveMode

    mode = ActiveMode(trainer=None, debug=DebugConfig(), topology=None)
    committed = []
    mode.commit_step_stats(lambda *step: committed.append(step), -1, -1, -1)
    assert committed == [(-1, -1, -1)]
    assert (mode.clock.next_step, mode.clock.current) == (0, None)
    mode.clock.start(0)
    assert mode.clock.advance() == 0  # step 0's batch, as if nothing came before
