# SPDX-License-Identifier: Apache-2.0
"""AReaL after main @cbff54d, which no installable build has: stand-ins built from
upstream's own newer files (read through the search index's file versions;
../shared/areal-after-cbff54d.md), each test naming the file it follows. The real
builds are the CI legs."""

from __future__ import annotations

import inspect
import os

import pytest

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


# -- #1563: one step, several prepare_batch calls ---------------------------------------
# areal/trainer/rl_trainer.py after #1563 (the index's 89,804-character version):
# PPOTrainer.train passes functools.partial(self.actor.prepare_batch, dataloader,
# **kw) to _collect_trainable_rollout_batch, which calls it until the batch holds
# min_batch_size groups (the largest data-parallel size of actor, critic, ref and
# train teacher in single-controller mode, 1 otherwise) and trains the
# concatenation of what the calls returned. The loop below states that contract.


def collect_until(prepare_batch, min_groups: int) -> list:
    batch: list = []
    while len(batch) < min_groups:
        batch.extend(prepare_batch())
    return batch


def _dump_mode(path: str, steps_per_epoch: int = 4):
    """areal-debug's real dump mode over a trainer reduced to what a step's
    batch and statistics commit touch (no engine: the calls below stand in)."""
    from types import SimpleNamespace

    from areal_debug.config import DebugConfig
    from areal_debug.modes.dump import DumpMode
    from areal_debug.modes.topology import Topology

    committed = []
    trainer = SimpleNamespace(
        actor=SimpleNamespace(
            data_parallel_rank=0, data_parallel_world_size=1, export_stats=dict
        ),
        rollout=SimpleNamespace(export_stats=dict),
        eval_rollout=None,
        train_dataloader=[None] * steps_per_epoch,
        stats_logger=SimpleNamespace(
            commit=lambda *step_and_stats: committed.append(step_and_stats[:3])
        ),
    )
    debug = DebugConfig(dump_rollout_data=True, path=path, writer_process=False)
    # One process: what every topology shares (no RNG gather, no workers).
    mode = DumpMode(trainer, debug, Topology())
    # As started() finds it on an AReaL whose trainer has
    # _collect_trainable_rollout_batch (areal_compat.collects_in_several_calls).
    mode.seals_each_call = False
    return mode, committed


def _group(seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 50, (2, 6), generator=g, dtype=torch.int32),
        "loss_mask": torch.ones(2, 6, dtype=torch.int32),
        "logprobs": -torch.rand(2, 6, generator=g),
        "versions": torch.zeros(2, 6, dtype=torch.int32),
        "attention_mask": torch.ones(2, 6, dtype=torch.bool),
        "rewards": torch.rand(2, generator=g),
    }


def _record_steps(path: str, calls: list[list[list]], min_groups: int, fetched: bool):
    """Steps whose prepare_batch calls return ``calls[step]`` in turn (each a
    list of groups), collected as #1563 does; each call hands its result to
    the recorder as the rollout engine's patch does in single-controller mode
    (``fetched``: a Future of the fetched copy) or SPMD mode (the list)."""
    from concurrent.futures import Future

    from areal_debug.recording.writer.start import write_manifest
    from tests.test_store import manifest

    os.environ.pop("AREAL_SPMD_MODE", None)
    write_manifest(path, manifest(steps_per_epoch=4))
    mode, committed = _dump_mode(path)
    mode.clock.start(0)
    trained = []
    for step, parts in enumerate(calls):
        served = iter(parts)

        def rollout_prepare_batch(*_, **__):
            part = next(served)
            if fetched:
                future: Future = Future()
                future.set_result(part)
                mode._record_batch(future)
            else:
                mode._record_batch(part)
            return part

        prepare = mode._clocked(rollout_prepare_batch)
        trained.append(collect_until(prepare, min_groups))
        mode.commit_step_stats(lambda *a: None, 0, step, step)
    mode.close_recording()
    return trained, committed


@pytest.mark.parametrize("fetched", [True, False], ids=["single-controller", "spmd"])
def test_a_step_that_calls_prepare_batch_several_times_is_recorded_once(
    tmp_path, fetched
):
    from areal_debug.recording.reader import RecordingReader
    from tests.test_store import assert_batches_equal

    groups = [_group(i) for i in range(7)]
    if fetched:
        # Single-controller, three data-parallel consumers: groups come in parts.
        calls = [[[groups[0]], [], [groups[1], groups[2]]], [groups[3:6]]]
        min_groups = 3
    else:
        # SPMD (minimum 1): a call follows only an empty one.
        calls = [[[], [], [groups[0], groups[1]]], [[groups[2]]]]
        min_groups = 1
    trained, committed = _record_steps(str(tmp_path), calls, min_groups, fetched)

    reader = RecordingReader(str(tmp_path))
    assert reader.available_steps() == [0, 1]  # not one step per call
    assert [c[2] for c in committed] == [0, 1]
    for step in (0, 1):
        assert_batches_equal(reader.load_batch(step), trained[step])
    assert reader.step_meta(0).num_trajectories == len(trained[0])


def test_the_collected_batch_is_on_disk_once_the_trainer_hands_it_on(tmp_path):
    """A step's parts are recorded when the trainer first uses the batch (the
    critic's values, the reference's or the actor's log-probs...), not at the
    step's end: a crash in the step's training finds its batch recorded."""
    from concurrent.futures import Future

    from support.waiting import wait_until

    from areal_debug.recording.writer.start import write_manifest
    from tests.test_store import manifest

    path = str(tmp_path)
    write_manifest(path, manifest(steps_per_epoch=4))
    mode, _ = _dump_mode(path)
    mode.clock.start(0)
    parts = iter([[_group(0)], [_group(1)]])

    def rollout_prepare_batch():
        part, fetched = next(parts), Future()
        fetched.set_result(part)
        mode._record_batch(fetched)
        return part

    batch = collect_until(mode._clocked(rollout_prepare_batch), 2)
    step_json = tmp_path / "step-000000" / "step.json"
    assert not step_json.exists()  # more parts could still come
    assert mode._completing(lambda data: len(data))(batch) == 2
    wait_until(step_json.exists, 30, "step 0 recorded once its batch was used")
    mode.close_recording()


def test_the_installed_areal_calls_prepare_batch_once_a_step():
    """No installable build has #1563: the recorder writes each call's batch at
    once, as a crash in the step's training finds it recorded."""
    from areal_debug import areal_compat

    assert areal_compat.collects_in_several_calls() is False


def test_a_replay_serves_the_whole_recorded_step_and_refuses_to_make_up_more(
    tmp_path,
):
    from types import SimpleNamespace

    from areal_debug.modes.replay import ReplayMode, UnsupportedReplayError
    from areal_debug.modes.replay_loader import ReplayDataLoader
    from areal_debug.recording.reader import RecordingReader

    groups = [_group(i) for i in range(4)]
    calls = [
        [[groups[0]], [groups[1], groups[2]]],
        [[groups[3]], [_group(8), _group(9)]],
    ]
    _record_steps(str(tmp_path), calls, 3, fetched=True)
    reader = RecordingReader(str(tmp_path))
    engine = ReplayEngine(ReplayDataLoader(reader, dp_rank=0, dp_size=1))
    # One call returns the whole step: #1563's loop ends after it.
    assert len(collect_until(lambda: engine.prepare_batch(), 3)) == 3
    # A topology needing more groups than the step holds is told so, by name.
    with pytest.raises(UnsupportedReplayError) as e:
        ReplayMode.more_of_step(SimpleNamespace(reader=reader), 0)
    assert "3 groups" in str(e.value) and "at most 3" in str(e.value)


def test_a_run_with_the_adaptive_tree_is_refused_as_not_replayable_saying_why():
    """areal/trainer/rl_trainer.py after cbff54d: ``actor.adaptive_tree`` (None
    when off) plans the tree layout per step (``begin_adaptive_cycle(batch,
    cycle_id=global_step)`` before the log-prob recompute) and keeps its state in
    the recover checkpoint's ``extra_state["adaptive_tree"]``."""
    from types import SimpleNamespace

    from areal_debug.modes.replay_setup import (
        UnsupportedReplayError,
        refuse_unsupported,
    )

    def config(adaptive_tree):
        return SimpleNamespace(actor=SimpleNamespace(adaptive_tree=adaptive_tree))

    refuse_unsupported(config(None), manifest=None)  # off: replayed as usual
    with pytest.raises(UnsupportedReplayError) as e:
        refuse_unsupported(config({"cp_sizes": [1, 2]}), manifest=None)
    assert "actor.adaptive_tree" in str(e.value)
    assert "extra_state" in str(e.value)
    assert "actor.adaptive_tree=null" in str(e.value)


def test_arealss_train_perf_statistics_are_timings_never_compared():
    """areal/utils/training_metrics.py (main after 2.1.0): train_perf/* carries
    the step's seconds and throughput, which differ between any two runs."""
    from areal_debug.compare.statistics import timing_stats, training_stats

    committed = {
        "ppo_actor/update/loss/avg": 0.5,
        "train_perf/step_seconds": 3.2,
        "train_perf/tflops_per_gpu": 41.0,
        "timeperf/train_step": 3.1,
    }
    assert training_stats(committed) == {"ppo_actor/update/loss/avg": 0.5}
    assert set(timing_stats(committed)) == {
        "train_perf/step_seconds",
        "train_perf/tflops_per_gpu",
        "timeperf/train_step",
    }


# -- #1592: pure multi-objective distillation ---------------------------------------
class _DistillingActor:
    """An actor with AReaL's prepare_mopd_batch (areal/trainer/ppo/actor.py after
    cbff54d): per trajectory it needs the teachers' ``mopd_teacher_logp_sum``,
    rolls the rollout log-probs and loss mask to next-token alignment and keeps
    the behaviour log-probs as ``mopd_behavior_logprobs``. It has no
    compute_advantages call in such a step (rl_trainer.py calls one or the other)."""

    def compute_logp(self, data):
        raise AssertionError("prox log-probs are not recomputed in this step")

    compute_advantages = train_batch = optimizer_step = compute_logp

    def prepare_mopd_batch(self, data):
        out = []
        for traj in data:
            traj = dict(traj)
            mask = traj["loss_mask"].float().roll(-1, dims=-1)
            behavior = traj["logprobs"].roll(-1, dims=-1)
            traj["mopd_behavior_logprobs"] = behavior * mask
            traj["logprobs"], traj["loss_mask"] = behavior * mask, mask
            out.append(traj)
        return out


def _distilled_step(teacher_shift: float) -> dict:
    """One pure-distillation step's stage digests, as the probes record them."""
    import torch

    from areal_debug import areal_compat
    from areal_debug.stages.probes import StageProbes

    actor = _DistillingActor()
    probes, patches = StageProbes(frozenset()), areal_compat.MethodPatches()
    probes.install_engine("actor", actor, patches)
    g = torch.Generator().manual_seed(0)
    batch = [
        {
            "logprobs": -torch.rand(2, 6, generator=g),
            "loss_mask": torch.ones(2, 6, dtype=torch.int32),
            "mopd_teacher_logp_sum": -torch.rand(2, generator=g) + teacher_shift,
        }
        for _ in range(2)
    ]
    actor.prepare_mopd_batch(batch)
    patches.remove_all()
    return {"ranks": [probes.take().digests], "global": {}}


def test_pure_distillation_is_a_stage_of_its_own_and_its_advantages_are_absent():
    from areal_debug.compare.stages import compare_stages, describe

    recorded = _distilled_step(0.0)
    assert set(recorded["ranks"][0]) == {"mopd"}
    assert len(recorded["ranks"][0]["mopd"]) == 4  # 2 trajectories x 2 keys

    same = compare_stages(recorded, _distilled_step(0.0), same_layout=True)
    assert same["mopd"]["status"] == "identical"
    assert same["advantages"]["status"] == "absent"
    assert "prepare_mopd_batch prepares the batch in place of compute_advantages" in (
        describe(0, same)
    )
    # Other teachers' sums: the step leaves the recording at its mopd stage.
    moved = compare_stages(recorded, _distilled_step(0.5), same_layout=True)
    assert moved["mopd"]["status"] == "differs"
    assert "mopd_teacher_logp_sum" in moved["mopd"]["where"]
