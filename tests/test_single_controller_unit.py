# SPDX-License-Identifier: Apache-2.0
"""The single-controller helpers against AReaL's own RTensor and dispatch code."""

from __future__ import annotations

import json
import threading

import pytest
import torch

import areal_debug.single_controller.rtensor_bridge as sc
from areal_debug.areal_compat import rtensor_types
from areal_debug.areal_compat import train_item_weight as _item_weight
from areal_debug.single_controller.rtensor_bridge import (
    REPLAY_NODE,
    as_inline_rtensors,
    without_inline_rtensors,
)
from areal_debug.single_controller.server_attach import server_infos_from_env

RTensor, TensorShardInfo = rtensor_types()


def group(lengths: list[int], width: int) -> dict:
    """One prompt's group, right-padded to ``width`` like RLVRWorkflow's output."""
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    ids = torch.arange(len(lengths) * width, dtype=torch.int32).view(len(lengths), -1)
    return {
        "input_ids": ids * mask,
        "attention_mask": mask,
        "logprobs": torch.randn(len(lengths), width) * mask,
        "rewards": torch.tensor([1.0] * len(lengths)),
    }


def test_replayed_trajectories_weigh_what_the_controller_saw_in_the_dump():
    # AReaL orders and balances trajectories by _item_weight; a plain tensor
    # weighs its token count, an RTensor its trimmed size.
    batch = [group([5, 9], 12), group([7, 7], 12), group([3, 11], 16)]
    dumped = [RTensor.remotize(t, node_addr="127.0.0.1:1") for t in batch]
    replayed = as_inline_rtensors(batch)
    assert [_item_weight(t) for t in replayed] == [_item_weight(t) for t in dumped]
    assert [_item_weight(t) for t in replayed] != [_item_weight(t) for t in batch]


def test_inline_rtensors_carry_the_trimmed_data_and_unwrap_for_clearing():
    traj = group([5, 9], 12)
    (inline,) = as_inline_rtensors([traj])
    rt = inline["input_ids"]
    assert isinstance(rt, RTensor) and rt.shard.node_addr == REPLAY_NODE
    assert not rt.data.is_meta
    assert torch.equal(rt.to_local(), traj["input_ids"][:, :9])
    # clear_batches must not see shards no worker stores; other RTensors stay.
    remote = RTensor.remotize(torch.ones(2), node_addr="127.0.0.1:1")
    cleared = without_inline_rtensors([{**inline, "prox_logp": remote}])
    assert isinstance(cleared[0]["input_ids"], torch.Tensor)
    assert not isinstance(cleared[0]["input_ids"], RTensor)
    assert cleared[0]["prox_logp"] is remote


def test_server_addresses_come_from_areal_llm_server_addrs(monkeypatch):
    monkeypatch.delenv("AREAL_LLM_SERVER_ADDRS", raising=False)
    assert server_infos_from_env(1) is None
    monkeypatch.setenv("AREAL_LLM_SERVER_ADDRS", "127.0.0.1:30000,10.0.0.2:30001")
    infos = server_infos_from_env(2)
    assert [(i.host, i.port) for i in infos] == [
        ("127.0.0.1", 30000),
        ("10.0.0.2", 30001),
    ]


def test_server_address_count_must_match_the_rollout_allocation(monkeypatch):
    monkeypatch.setenv("AREAL_LLM_SERVER_ADDRS", "127.0.0.1:30000")
    with pytest.raises(ValueError, match="names 1 server.*has 2 data-parallel"):
        server_infos_from_env(2)


def test_a_malformed_server_address_is_named(monkeypatch):
    monkeypatch.setenv("AREAL_LLM_SERVER_ADDRS", "localhost")
    with pytest.raises(ValueError, match="'localhost' is not host:port"):
        server_infos_from_env(1)


class _Backend:
    """Stands in for AReaL's HTTP RTensor backend (the storage node)."""

    def __init__(self, tensors: dict | None = None):
        self.tensors = tensors
        self.gate = threading.Event()
        self.gate.set()

    def fetch(self, shards):
        self.gate.wait(timeout=30)
        if self.tensors is None:
            raise ConnectionError("storage node unreachable")
        return [self.tensors[s.shard_id].clone() for s in shards]


def remote_batch(batch: list[dict]) -> tuple[list[dict], dict]:
    store, out = {}, []
    for i, traj in enumerate(batch):
        refs = {}
        for key, tensor in traj.items():
            sid = f"{i}/{key}"
            store[sid] = tensor
            shard = TensorShardInfo(shard_id=sid, node_addr="127.0.0.1:1")
            refs[key] = RTensor(shard=shard, data=tensor.to("meta"))
        out.append(refs)
    return out, store


def test_fetcher_records_the_batch_as_returned_whatever_the_trainer_adds(
    monkeypatch,
):
    batch = [group([5, 9], 12), group([7, 7], 12)]
    remote, store = remote_batch(batch)
    backend = _Backend(store)
    backend.gate.clear()  # the fetch runs only after the trainer's changes
    monkeypatch.setattr(sc, "fetch_rtensor_shards", backend.fetch)
    fetcher = sc.BatchFetcher()
    future = fetcher.submit(remote)
    # PPOTrainer adds keys to the very dicts right after prepare_batch.
    for traj in remote:
        traj["prox_logp"] = torch.zeros(2, 12)
    backend.gate.set()
    fetcher.wait()
    fetched = future.result()
    fetcher.close()
    assert [sorted(t) for t in fetched] == [sorted(t) for t in batch]
    for got, want in zip(fetched, batch, strict=True):
        for key in want:
            assert torch.equal(got[key], want[key])
    # The batch AReaL goes on with still holds references, not data.
    assert remote[0]["input_ids"].data.is_meta


def test_a_failed_fetch_stops_training_at_step_end_with_the_cause(monkeypatch):
    remote, _ = remote_batch([group([5, 9], 12)])
    monkeypatch.setattr(sc, "fetch_rtensor_shards", _Backend(None).fetch)
    fetcher = sc.BatchFetcher()
    fetcher.submit(remote)
    with pytest.raises(RuntimeError, match="storage node unreachable"):
        fetcher.wait()
    fetcher.close()


def test_writer_awaits_a_fetched_batch_on_its_own_thread(tmp_path):
    from concurrent.futures import Future

    from areal_debug.recording.reader import RecordingReader
    from areal_debug.recording.writer.recording_writer import RecordingWriter
    from areal_debug.recording.writer.start import write_manifest

    path = str(tmp_path / "rec")
    write_manifest(
        path,
        {
            "format_version": 1,
            "created": "t",
            "experiment_name": "e",
            "trial_name": "t",
            "layout": {
                "mode": "single-controller",
                "num_shards": 1,
                "steps_per_epoch": 1,
            },
        },
    )
    writer = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=1)
    batch = [group([5, 9], 12)]
    future: Future = Future()
    writer.submit_batch(0, future)
    future.set_result(batch)
    writer.close()
    (got,) = RecordingReader(path).load_shard(0, 0)
    assert torch.equal(got["logprobs"], batch[0]["logprobs"])


def over_rpc(value):
    """What AReaL's RPC makes of a value: serialized, sent as JSON, deserialized."""
    from areal.infra.rpc import deserialize_value, serialize_value

    return deserialize_value(json.loads(json.dumps(serialize_value(value))))


def test_a_stage_record_crosses_the_rpc_as_a_plain_dict():
    from areal_debug.stages.record import StageRecord

    record = StageRecord(
        {"logp": {"trajectory 0": ["00ff", None]}, "grads": {"w": [1, -2, 0.5]}},
        {("logp", "trajectory 0"): torch.randn(2, 3)},
        0.25,
        ref_forwards=2,
    )
    again = StageRecord.from_dict(over_rpc(record.to_dict()))
    assert again.digests == record.digests
    assert (again.seconds, again.ref_forwards) == (0.25, 2)
    assert list(again.tensors) == [("logp", "trajectory 0")]
    assert torch.equal(*again.tensors.values(), *record.tensors.values())
    assert StageRecord.from_dict(over_rpc(StageRecord(None).to_dict())) == (
        StageRecord(None)
    )
    # Shipped as it is, the record's kept tensors would not cross (nor stay local).
    with pytest.raises(TypeError, match="keys must be str"):
        over_rpc(record)


class _Controller:
    """A TrainController of one worker: calls its engine by name, over the RPC."""

    def __init__(self, engine):
        self.engine = engine

    def _custom_function_call(self, method, *args, rpc_meta=None):
        return over_rpc(getattr(self.engine, method)(*over_rpc(list(args))))


def test_the_workers_stage_records_reach_the_controller_united_per_rank():
    from areal_debug.single_controller.probed_engines import (
        StageProbedEngine,
        WorkerStageProbes,
    )

    class Critic(StageProbedEngine):
        def compute_values(self, data):
            return [torch.full((2, 3), 0.5) for _ in data]

    class Ref(StageProbedEngine):
        def forward(self, data):
            raise AssertionError("the recorded log-probs stand in for the reference")

        def compute_logp(self, data):
            return [self.forward(t) for t in data]

    critic, ref = Critic(), Ref()
    probes = WorkerStageProbes()
    probes.controllers += [("critic", _Controller(critic)), ("ref", _Controller(ref))]
    probes.start(frozenset({"values", "ref_logp"}), recorded_ref=True)
    logps = torch.full((4, 3), -1.0)
    probes.hand_over_ref_logp(0, {"rank 0/ref_logp/trajectory 0": logps})
    critic.compute_values([{}])
    ref.compute_logp([{"input_ids": torch.zeros(4, 3)}])
    (record,) = probes.take()
    assert list(record.digests) == ["values", "ref_logp"]
    assert record.ref_forwards == 0
    kept = record.keyed_tensors(0)
    assert sorted(kept) == [
        "rank 0/ref_logp/trajectory 0",
        "rank 0/ref_logp/trajectory 0 tokens",  # which rows they are
        "rank 0/values/trajectory 0",
    ]
    assert torch.equal(kept["rank 0/ref_logp/trajectory 0"], logps)


def test_the_workers_actor_digests_the_weights_after_each_mini_batch():
    # In the RPC worker, AReaL's ppo_update calls the engine's own train_batch
    # and optimizer_step once per mini-batch: the probes on the worker's engine
    # digest the weights at each, as in SPMD mode.
    from areal_debug.single_controller.probed_engines import (
        StageProbedEngine,
        WorkerStageProbes,
    )
    from areal_debug.stages.digest import digest_hex, digest_pair
    from areal_debug.stages.stage_log import merge_global

    class Actor(StageProbedEngine):
        def __init__(self):
            self.model = torch.nn.Linear(2, 1, bias=False)

        def compute_logp(self, data):
            return [torch.zeros(1, 2) for _ in data]

        def compute_advantages(self, data):
            return [{"advantages": torch.ones(1, 2)} for _ in data]

        def train_batch(self, data, loss_fn, loss_weight_fn=None):
            loss_fn(torch.tensor(data)).backward()
            return self.optimizer_step()

        def optimizer_step(self):
            with torch.no_grad():
                for p in self.model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
            return {}

        def ppo_update(self, data):
            for mb in data:  # AReaL's PPOActor._ppo_update, over the RPC
                self.train_batch(mb, loss_fn=lambda x: self.model(x).sum())

    actor = Actor()
    probes = WorkerStageProbes()
    probes.controllers.append(("actor", _Controller(actor)))
    probes.start(frozenset(), recorded_ref=False)
    _Controller(actor)._custom_function_call("ppo_update", [[1.0, 2.0], [3.0, 4.0]])
    (record,) = probes.take()
    merged = merge_global([record.digests])
    assert merged["weights_per_mini_batch"] is True
    assert list(merged["global"]["weights"]) == [
        "mini-batch 0 weight",
        "mini-batch 1 weight",
    ]
    assert list(merged["ranks"][0]["loss"]) == [
        "mini-batch 0 micro-batch 0",
        "mini-batch 1 micro-batch 0",
    ]
    after = digest_hex(digest_pair(actor.model.weight))
    assert merged["global"]["weights"]["mini-batch 1 weight"][0] == after
    assert merged["global"]["weights"]["mini-batch 0 weight"][0] != after


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({}, False),
        ({"freq_steps": 10}, True),
        ({"freq_epochs": 1}, True),
        ({"freq_secs": 600}, True),
    ],
)
def test_only_a_run_that_evaluates_gets_an_eval_rollout_worker(overrides, expected):
    """AReaL's own EvaluatorConfig: any frequency set means evaluation runs, so
    the dump starts the eval-rollout worker as AReaL does."""
    from areal.api.cli_args import EvaluatorConfig, GRPOConfig

    from areal_debug.modes.dump import evaluates

    config = GRPOConfig(
        experiment_name="x",
        trial_name="y",
        evaluator=EvaluatorConfig(
            experiment_name="x", trial_name="y", fileroot="/tmp", **overrides
        ),
    )
    assert config.evaluator.freq_epochs is overrides.get("freq_epochs")
    assert evaluates(config) is expected
