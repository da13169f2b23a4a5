# SPDX-License-Identifier: Apache-2.0
"""The packed form of a payload (recording/packed_payload.py), against values
written out by hand: what a format v2 payload holds must not change when the
code that builds it does."""

from __future__ import annotations

from collections import OrderedDict

import torch

from areal_debug.recording.packed_payload import pack, plan, unpack


def _value():
    return [
        {
            "ids": torch.arange(6, dtype=torch.int32).reshape(2, 3),
            "logp": torch.tensor([0.5, -0.0, float("nan"), float("-inf")]),
            "tag": "text",
            "pair": (torch.tensor([7], dtype=torch.int32), 5),
        },
        OrderedDict(mask=torch.ones(2, 2, 2, dtype=torch.bool)),
        torch.zeros(0, 3),
    ]


def test_the_packed_form_is_the_one_written_down():
    packed = pack(_value())
    assert packed["packed"] == 1
    assert packed["template"] == [
        {"ids": None, "logp": None, "tag": "text", "pair": (None, 5)},
        {"mask": None},
        None,
    ]
    assert isinstance(packed["template"][0]["pair"], tuple)
    # Depth-first leaves: ids 0, logp 1, tag 2, pair's tensor 3, 5 at 4, mask 5,
    # the empty tensor 6.
    assert packed["tensor_leaves"].tolist() == [0, 1, 3, 5, 6]
    assert packed["dtypes"] == ["int32", "float32", "bool"]
    # dtype code, offset in its dtype's buffer, ndim, dims padded to 3.
    assert packed["table"].tolist() == [
        [0, 0, 2, 2, 3, 0],
        [1, 0, 1, 4, 0, 0],
        [0, 6, 1, 1, 0, 0],
        [2, 0, 3, 2, 2, 2],
        [1, 4, 2, 0, 3, 0],
    ]
    assert packed["table"].dtype == packed["tensor_leaves"].dtype == torch.int64
    assert [b.numel() for b in packed["buffers"]] == [7, 4, 8]


def test_a_value_comes_back_bit_for_bit():
    value = _value()
    back = unpack(pack(value))
    assert back[0]["tag"] == "text" and back[0]["pair"][1] == 5
    for a, b in [
        (value[0]["ids"], back[0]["ids"]),
        (value[0]["logp"], back[0]["logp"]),
        (value[0]["pair"][0], back[0]["pair"][0]),
        (value[1]["mask"], back[1]["mask"]),
        (value[2], back[2]),
    ]:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert (
            a.view(-1).view(torch.uint8).tolist()
            == b.view(-1).view(torch.uint8).tolist()
        )


def test_a_plan_without_tensors():
    p = plan({"a": 1, "b": [2, "x"]})
    assert p.numels() == [] and list(p.tensor_leaves) == []
    packed = p.packed([])
    assert packed["table"].shape == (0, 3)
    assert packed["tensor_leaves"].shape == (0,)
    assert unpack(packed) == {"a": 1, "b": [2, "x"]}
