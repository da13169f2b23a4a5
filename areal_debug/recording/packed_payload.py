# SPDX-License-Identifier: Apache-2.0
"""A payload's tensors packed into one flat buffer per dtype (format v2 payloads).

A rollout batch holds hundreds of small tensors. ``torch.save`` pickles each one
through Python (dozens of objects per tensor, all under the GIL, which starves a
training thread running beside the writer) and writes one record each. Packed,
the same batch is a handful of buffers, a table of where each tensor lies, and
the containers with the tensors left out: what is pickled is small and what is
large is copied by torch with the GIL released.

Packed form (plain containers and tensors, loadable with ``weights_only=True``)::

    {"packed": 1,
     "template": the containers, each tensor leaf replaced by None,
     "tensor_leaves": int64 [n], the depth-first leaf numbers that are tensors,
     "table": int64 [n, 3 + max_ndim], per tensor: dtype code, offset, ndim, dims,
     "dtypes": [dtype names, indexed by code],
     "buffers": [one 1-D tensor per dtype code]}

Values, dtypes and shapes round-trip exactly; strides do not (every tensor comes
back contiguous).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

PACKED_LAYOUT = 1


def _walk(value: Any, leaves: list) -> Any:
    """The template of ``value``; its leaves (tensors and others) appended in order."""
    if isinstance(value, dict):
        return {k: _walk(v, leaves) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [_walk(v, leaves) for v in value]
        return items if isinstance(value, list) else tuple(items)
    leaves.append(value)
    return None if isinstance(value, torch.Tensor) else value


@dataclass
class PackPlan:
    """Where ``pack`` puts each tensor of a value, read off before anything is
    copied: what the writer process needs to read the tensors out of the
    training process's memory itself (``writer.process``)."""

    template: Any
    tensor_leaves: list[int]
    table: list[list[int]]
    dtypes: list[str]
    # The tensors of each dtype code, in buffer order; dropped (None) where the
    # plan crosses to the writer process.
    groups: list[list[torch.Tensor]] | None

    def numels(self) -> list[int]:
        """Elements of each dtype's buffer."""
        ends = [0] * len(self.dtypes)
        for code, offset, ndim, *dims in self.table:
            ends[code] = max(ends[code], offset + numel(dims[:ndim]))
        return ends

    def packed(self, buffers: list[torch.Tensor]) -> dict[str, Any]:
        """The packed form, given each dtype's buffer filled as planned."""
        width = len(self.table[0]) if self.table else 3
        return {
            "packed": PACKED_LAYOUT,
            "template": self.template,
            "tensor_leaves": torch.tensor(self.tensor_leaves, dtype=torch.int64),
            "table": torch.tensor(self.table, dtype=torch.int64).reshape(
                len(self.table), width
            ),
            "dtypes": list(self.dtypes),
            "buffers": buffers,
        }


def numel(shape) -> int:
    """Elements of a tensor of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return n


def plan(value: Any) -> PackPlan:
    """Read off where ``pack`` puts each tensor of ``value``: pure Python, no
    tensor operation (each would give the GIL up and wait to take it back)."""
    leaves: list = []
    template = _walk(value, leaves)
    codes: dict[torch.dtype, int] = {}
    groups: list[list[torch.Tensor]] = []
    offsets: list[int] = []
    where, rows = [], []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            continue
        code = codes.setdefault(leaf.dtype, len(codes))
        if code == len(groups):
            groups.append([])
            offsets.append(0)
        groups[code].append(leaf)
        where.append(i)
        # size(), not .shape: a quarter of the time, 768 times a step.
        size = leaf.size()
        rows.append([code, offsets[code], len(size), *size])
        offsets[code] += leaf.numel()
    width = 3 + max((len(r) - 3 for r in rows), default=0)
    table = [r + [0] * (width - len(r)) for r in rows]
    dtypes = [str(d).removeprefix("torch.") for d in codes]
    return PackPlan(template, where, table, dtypes, groups)


def pack(value: Any) -> dict[str, Any]:
    """The packed form of ``value`` (a batch, or any container of tensors).

    One ``flatten_dense_tensors`` call per dtype: the writer thread takes the
    GIL back a handful of times per step, not once per tensor (each time it
    may wait a whole switch interval behind a busy training thread).
    """
    p = plan(value)
    with torch.no_grad():
        buffers = [torch._C._nn.flatten_dense_tensors(g) for g in p.groups]
    return p.packed(buffers)


def is_packed(value: Any) -> bool:
    return isinstance(value, dict) and "packed" in value and "template" in value


def unpack(packed: dict[str, Any], copy: bool = True) -> Any:
    """The value ``pack`` was given. ``copy`` gives each tensor its own storage:
    a view would carry the whole buffer into anything that pickles it (AReaL
    broadcasts batches between ranks)."""
    if packed.get("packed") != PACKED_LAYOUT:
        raise ValueError(
            f"packed layout {packed.get('packed')!r} is not one this areal-debug "
            f"reads ({PACKED_LAYOUT})"
        )
    buffers = packed["buffers"]
    tensors = {}
    for leaf, row in zip(
        packed["tensor_leaves"].tolist(), packed["table"].tolist(), strict=True
    ):
        code, offset, ndim = row[0], row[1], row[2]
        shape = row[3 : 3 + ndim]
        n = numel(shape)
        if not (
            0 <= code < len(buffers)
            and len(shape) == ndim
            and min(shape, default=0) >= 0
            and 0 <= offset <= offset + n <= buffers[code].numel()
        ):
            raise ValueError(
                f"tensor at leaf {leaf} lies outside its buffer (dtype code {code}, "
                f"offset {offset}, shape {shape})"
            )
        t = buffers[code][offset : offset + n].view(shape)
        tensors[leaf] = t.clone() if copy else t
    counter = iter(range(1 << 62))
    return _fill(packed["template"], tensors, counter)


def _fill(template: Any, tensors: dict[int, torch.Tensor], counter) -> Any:
    if isinstance(template, dict):
        return {k: _fill(v, tensors, counter) for k, v in template.items()}
    if isinstance(template, list | tuple):
        items = [_fill(v, tensors, counter) for v in template]
        return items if isinstance(template, list) else tuple(items)
    return tensors.get(next(counter), template)
