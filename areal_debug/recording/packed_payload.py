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

from array import array
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import torch

PACKED_LAYOUT = 1


_TENSOR = torch.Tensor


def _walk(value: Any, leaves: list) -> Any:
    """The template of ``value``; its leaves (tensors and others) appended in order.

    Dicts, lists and tuples are told by their exact type first, and a tensor
    inside one is taken without a call of its own: the writer thread runs this
    under the GIL for every tensor of a batch, beside a training thread."""
    cls = type(value)
    if cls is dict:
        out = {}
        for k, v in value.items():
            if type(v) is _TENSOR:
                leaves.append(v)
                out[k] = None
            else:
                out[k] = _walk(v, leaves)
        return out
    if cls is list or cls is tuple:
        items = []
        for v in value:
            if type(v) is _TENSOR:
                leaves.append(v)
                items.append(None)
            else:
                items.append(_walk(v, leaves))
        return items if cls is list else tuple(items)
    # Subclasses (an OrderedDict, a tensor subclass) and plain values.
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
    training process's memory itself (``writer.process``).

    The training process records only each tensor's dtype code and shape, in
    flat int64 arrays (two byte strings when the plan crosses to the writer
    process, not thousands of pickled ints); offsets and the padded table are
    worked out where the payload is stored (``layout``)."""

    template: Any
    # The depth-first leaf numbers that are tensors.
    tensor_leaves: array
    # Per tensor, in leaf order: dtype code, ndim, dims.
    shapes: array
    dtypes: list[str]
    # The tensors of each dtype code, in buffer order; dropped (None) where the
    # plan crosses to the writer process.
    groups: list[list[torch.Tensor]] | None

    @cached_property
    def layout(self) -> Layout:
        """The table and each dtype's buffer size, worked out once (the writer
        process asks for the sizes first, then for the packed form)."""
        rows, ends = [], [0] * len(self.dtypes)
        shapes, at = self.shapes, 0
        while at < len(shapes):
            code, ndim = shapes[at], shapes[at + 1]
            dims = list(shapes[at + 2 : at + 2 + ndim])
            at += 2 + ndim
            rows.append([code, ends[code], ndim, *dims])
            ends[code] += numel(dims)
        width = 3 + max((row[2] for row in rows), default=0)
        table = [row + [0] * (width - len(row)) for row in rows]
        return Layout(table, width, ends)

    def numels(self) -> list[int]:
        """Elements of each dtype's buffer."""
        return self.layout.numels

    def packed(self, buffers: list[torch.Tensor]) -> dict[str, Any]:
        """The packed form, given each dtype's buffer filled as planned."""
        table, width, _ = self.layout
        return {
            "packed": PACKED_LAYOUT,
            "template": self.template,
            "tensor_leaves": torch.tensor(list(self.tensor_leaves), dtype=torch.int64),
            "table": torch.tensor(table, dtype=torch.int64).reshape(len(table), width),
            "dtypes": list(self.dtypes),
            "buffers": buffers,
        }


class Layout(NamedTuple):
    """Where a plan's tensors lie in their buffers."""

    # Per tensor: dtype code, offset in its dtype's buffer, ndim, dims
    # zero-padded to ``width``.
    table: list[list[int]]
    width: int
    # Elements of each dtype's buffer.
    numels: list[int]


def numel(shape) -> int:
    """Elements of a tensor of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return n


def plan(value: Any) -> PackPlan:
    """Read off where ``pack`` puts each tensor of ``value``: pure Python, no
    tensor operation (each would give the GIL up and wait to take it back), and
    as little per tensor as a reader needs (the writer thread runs it under the
    GIL, beside a training thread)."""
    leaves: list = []
    template = _walk(value, leaves)
    codes: dict[torch.dtype, int] = {}
    groups: list[list[torch.Tensor]] = []
    where = array("q")
    shapes: list[int] = []
    for i, leaf in enumerate(leaves):
        if type(leaf) is not _TENSOR and not isinstance(leaf, torch.Tensor):
            continue
        dtype = leaf.dtype
        code = codes.get(dtype)
        if code is None:
            code = codes[dtype] = len(groups)
            groups.append([])
        groups[code].append(leaf)
        where.append(i)
        # size(), not .shape: a quarter of the time, 768 times a step.
        size = leaf.size()
        shapes.extend((code, len(size), *size))
    dtypes = [str(d).removeprefix("torch.") for d in codes]
    return PackPlan(template, where, array("q", shapes), dtypes, groups)


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
