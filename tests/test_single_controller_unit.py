# SPDX-License-Identifier: Apache-2.0
"""The single-controller helpers against AReaL's own RTensor and dispatch code."""

from __future__ import annotations

import pytest
import torch
from areal.infra.controller.train_controller import _item_weight
from areal.infra.rpc.rtensor import RTensor

from areal_debug.single_controller import (
    REPLAY_NODE,
    as_inline_rtensors,
    server_infos_from_env,
    without_inline_rtensors,
)


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
