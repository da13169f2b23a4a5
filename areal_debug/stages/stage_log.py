# SPDX-License-Identifier: Apache-2.0
"""One step's log of stage digests on one rank, and the ranks' logs merged.

The digests stay on the device until the step's end: each call's digests are one
block (``[k, 2]`` int64, and its magnitudes), and ``to_host`` moves every block
in one transfer per device. Small tensors (a micro-batch's loss) are copied and
digested together at the step's end: a digest call per loss would be a dozen
kernel launches each, hundreds of micro-batches a step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from areal_debug.stages.digest import (
    MASK,
    digest_hex,
    digest_pairs,
    sums_of_squares,
)
from areal_debug.stages.names import GLOBAL_STAGES, WEIGHTS_PER_MINI_BATCH

# Tensors of at most this many elements are copied and digested at the step's end.
_DEFERRED_AT_MOST = 1 << 12


class Magnitude(str, Enum):
    """What says "by how much" beside a digest, without the tensor."""

    NONE = "none"
    # The sum of squares, summed across ranks for a sharded tensor and
    # square-rooted: a norm (gradients).
    SUMSQ = "sumsq"
    # The tensor's first element (a loss).
    VALUE = "value"


@dataclass
class StageEntry:
    """Where one tensor's digest waits for the step's transfer: row ``row`` of
    block ``block`` (-1 while it waits among the small tensors)."""

    block: int = -1
    row: int = 0
    magnitude: Magnitude = Magnitude.NONE


@dataclass
class _Block:
    pairs: torch.Tensor  # [k, 2] int64
    nums: torch.Tensor | None  # [k] float64, or no magnitudes


@dataclass
class _Small:
    entry: StageEntry
    # A copy: the caller may reuse or change its tensor before the step ends.
    tensor: torch.Tensor
    offset: int


@dataclass
class StageLog:
    """Everything one rank digested during one step, stage by stage."""

    # Stages whose full tensors are kept too (a subset of TOKEN_STAGES).
    keep: frozenset[str] = frozenset()
    entries: dict[str, dict[str, StageEntry]] = field(default_factory=dict)
    # The kept tensors by (stage, name); StageRecord.keyed_tensors names them.
    tensors: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    # Time spent digesting on this rank (host wall clock; the transfer in
    # to_host waits for the device), for the cost figure in stages.json.
    seconds: float = 0.0
    blocks: list[_Block] = field(default_factory=list)
    small: list[_Small] = field(default_factory=list)

    def next_index(self, counter: str) -> int:
        """0, 1, 2... per counter name (mini-batches, micro-batches, calls)."""
        n = self.counters.get(counter, 0)
        self.counters[counter] = n + 1
        return n

    def add(
        self,
        stage: str,
        name: str,
        t: torch.Tensor,
        *,
        offset: int = 0,
        norm: bool = False,
        value: bool = False,
    ) -> None:
        t0 = time.perf_counter()
        x = t.detach()
        magnitude = _magnitude_of(norm, value)
        if x.numel() <= _DEFERRED_AT_MOST:
            entry = StageEntry(magnitude=magnitude)
            self.small.append(_Small(entry, x.clone(), offset))
            self.entries.setdefault(stage, {})[name] = entry
        else:
            self._add_block(stage, [(name, x, offset)], magnitude)
        self._keep(stage, name, x)
        self.seconds += time.perf_counter() - t0

    def add_many(
        self,
        stage: str,
        items: list[tuple[str, torch.Tensor, int]],
        *,
        norm: bool = False,
    ) -> None:
        """``add`` for many ``(name, tensor, offset)`` at once: one block."""
        if not items:
            return
        t0 = time.perf_counter()
        self._add_block(stage, items, _magnitude_of(norm, False))
        for name, t, _ in items:
            self._keep(stage, name, t)
        self.seconds += time.perf_counter() - t0

    def add_pairs(self, stage: str, names: list[str], pairs: torch.Tensor) -> None:
        """Digests already taken (``[k, 2]`` int64, ``digest_pair``'s sums, on
        the device), one block: where a stage derives its tensors' digests from
        finer ones it keeps (stages/layers.py)."""
        self._append_block(stage, names, _Block(pairs, None), Magnitude.NONE)

    def adopt(self, other: StageLog) -> None:
        """Take ``other``'s digests (and its time) into this log: a stage
        digested on its own, once, that belongs to this step too."""
        other._digest_small()
        base = len(self.blocks)
        self.blocks += other.blocks
        for stage, names in other.entries.items():
            mine = self.entries.setdefault(stage, {})
            for name, e in names.items():
                mine[name] = StageEntry(e.block + base, e.row, e.magnitude)
        self.tensors.update(other.tensors)
        self.seconds += other.seconds

    def keep_only(self, stage: str, name: str, t: torch.Tensor) -> None:
        """Keep ``t`` beside the stage's kept tensors, undigested: what identifies
        a row (its tokens), not a result a replay compares."""
        self._keep(stage, name, t)

    def keep_always(self, stage: str, name: str, t: torch.Tensor) -> None:
        """Keep ``t`` (small, on the host) whatever ``keep`` says: the per-token
        digests a stage took because they were cheap (stages/layers.py)."""
        self.tensors[(stage, name)] = t

    def to_host(self) -> dict[str, dict[str, list]]:
        """Plain values, one device-to-host transfer per device: ``{stage: {name:
        [hex, norm|value|None]}}``; global stages carry ``[s1, s2, sumsq]`` still
        to be summed."""
        if not any(self.entries.values()):
            return {}
        t0 = time.perf_counter()
        self._digest_small()
        pairs = _lists_on_host([b.pairs for b in self.blocks])
        with_nums = [i for i, b in enumerate(self.blocks) if b.nums is not None]
        nums = dict(
            zip(with_nums, _lists_on_host([self.blocks[i].nums for i in with_nums]))
        )
        out: dict[str, dict[str, list]] = {}
        for stage, names in self.entries.items():
            for name, e in names.items():
                pair = pairs[e.block][e.row]
                num = None
                if e.magnitude is not Magnitude.NONE:
                    num = nums[e.block][e.row]
                if stage in GLOBAL_STAGES:
                    out.setdefault(stage, {})[name] = [*pair, num]
                else:
                    if e.magnitude is Magnitude.SUMSQ:
                        num = math.sqrt(num)
                    out.setdefault(stage, {})[name] = [digest_hex(pair), num]
        self.seconds += time.perf_counter() - t0
        return out

    def _add_block(self, stage: str, items: list, magnitude: Magnitude) -> None:
        tensors = [t for _, t, _ in items]
        pairs = digest_pairs(tensors, [o for _, _, o in items])
        block = _Block(pairs, _magnitudes(tensors, magnitude))
        self._append_block(stage, [name for name, _, _ in items], block, magnitude)

    def _append_block(
        self, stage: str, names: list[str], block: _Block, magnitude: Magnitude
    ) -> None:
        """``block`` after the others, row k the digest of ``names[k]``."""
        index = len(self.blocks)
        self.blocks.append(block)
        entries = self.entries.setdefault(stage, {})
        for row, name in enumerate(names):
            entries[name] = StageEntry(index, row, magnitude)

    def _digest_small(self) -> None:
        """The small tensors waiting, one block per kind of magnitude."""
        for magnitude in Magnitude:
            waiting = [s for s in self.small if s.entry.magnitude is magnitude]
            if not waiting:
                continue
            tensors = [s.tensor for s in waiting]
            index = len(self.blocks)
            pairs = digest_pairs(tensors, [s.offset for s in waiting])
            self.blocks.append(_Block(pairs, _magnitudes(tensors, magnitude)))
            for row, s in enumerate(waiting):
                s.entry.block, s.entry.row = index, row
        self.small = []

    def _keep(self, stage: str, name: str, t: torch.Tensor) -> None:
        if stage in self.keep:
            self.tensors[(stage, name)] = t.detach().to("cpu", copy=True)


def _magnitude_of(norm: bool, value: bool) -> Magnitude:
    if norm:
        return Magnitude.SUMSQ
    return Magnitude.VALUE if value else Magnitude.NONE


def _magnitudes(tensors: list[torch.Tensor], magnitude: Magnitude):
    """``[k]`` float64 on the tensors' device, or None."""
    if magnitude is Magnitude.SUMSQ:
        return sums_of_squares(tensors)
    if magnitude is Magnitude.NONE:
        return None
    firsts = [t.detach().reshape(-1)[:1] for t in tensors]
    if all(f.numel() for f in firsts):
        return torch.cat(firsts).double()
    # An empty tensor's value is 0.
    return torch.stack([f.double().sum() for f in firsts])


def _lists_on_host(tensors: list[torch.Tensor]) -> list[list]:
    """Each tensor's ``tolist()``, with one transfer per device."""
    out: list = [None] * len(tensors)
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    for members in by_device.values():
        joined = torch.cat([tensors[i] for i in members]).cpu().tolist()
        start = 0
        for i in members:
            out[i] = joined[start : start + len(tensors[i])]
            start += len(tensors[i])
    return out


def merge_global(
    per_rank: list[dict[str, dict[str, list]]], seconds: list[float] | None = None
) -> dict[str, Any]:
    """Rank logs in, the recorded form out: per-rank stages kept per rank, global
    stages summed over ranks (the shards of one tensor) into one digest each;
    ``seconds`` each rank spent digesting, when given. Marked
    ``WEIGHTS_PER_MINI_BATCH``: the probes digest the weights per mini-batch."""
    merged: dict[str, Any] = {"ranks": [], "global": {}, WEIGHTS_PER_MINI_BATCH: True}
    if seconds is not None:
        merged["digest_seconds"] = [float(s) for s in seconds]
    sums: dict[str, dict[str, list]] = {}
    for log in per_rank:
        merged["ranks"].append({s: v for s, v in log.items() if s not in GLOBAL_STAGES})
        for stage in GLOBAL_STAGES:
            for name, (s1, s2, sq) in log.get(stage, {}).items():
                acc = sums.setdefault(stage, {}).setdefault(name, [0, 0, None])
                acc[0] = (acc[0] + s1) & MASK
                acc[1] = (acc[1] + s2) & MASK
                if sq is not None:
                    acc[2] = (acc[2] or 0.0) + sq
    for stage, names in sums.items():
        merged["global"][stage] = {
            name: [
                digest_hex((s1, s2)),
                math.sqrt(sq) if sq is not None else None,
            ]
            for name, (s1, s2, sq) in names.items()  # model order
        }
    return merged
