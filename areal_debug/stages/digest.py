# SPDX-License-Identifier: Apache-2.0
"""Exact tensor digests computed where the tensor lives, and one step's log of them.

A digest is two 64-bit integer sums over a tensor's bit patterns, read as
integers: ``s1 = sum(b_i)`` and ``s2 = sum(b_i * (i + 1))`` with ``i`` the
element's index in the whole (unsharded) tensor, both modulo 2**64. Any single
changed bit changes ``s1``; a swap of two values changes ``s2``. Integer sums
wrap the same way in any order, so the digest does not depend on how a
reduction is split, and the digest of a sharded tensor is the sum of its
shards' digests: each data-parallel rank digests its own shard and the small
pairs are summed across ranks.

The cost is one read of the tensor on its device (plus an int64 copy of one
chunk at a time) and one transfer of 16 bytes per tensor at the end of a step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.stages.names import GLOBAL_STAGES, WEIGHTS_PER_MINI_BATCH

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# Elements digested per pass: bounds the int64 temporaries (128 MiB each). On
# the CPU a pass that fits in the core's cache (512 KiB temporaries) is several
# times faster than one that streams through memory: 13 ms against 94 ms for 7 M
# float32 values on one thread here.
_CHUNK = 1 << 24
_CPU_CHUNK = 1 << 16
_MASK = (1 << 64) - 1


def _on_cpu(device: torch.device) -> bool:
    """Where a kernel call costs no launch and memory, not arithmetic, is slow."""
    return device.type == "cpu"


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements' bit patterns as integers of the same width (a view)."""
    x = t.detach()
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.contiguous().reshape(-1).view(_INT_OF_SIZE[x.element_size()])


def digest_pair(t: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """``[s1, s2]`` (int64, on ``t``'s device) of ``t``'s bits; ``offset`` is the
    flat index of ``t``'s first element in the whole tensor it is a shard of."""
    bits = _bits(t)
    out = torch.zeros(2, dtype=torch.int64, device=bits.device)
    step = _CPU_CHUNK if _on_cpu(bits.device) else _CHUNK
    for start in range(0, bits.numel(), step):
        chunk = bits[start : start + step].to(torch.int64)
        first = offset + start + 1
        index = torch.arange(
            first, first + chunk.numel(), dtype=torch.int64, device=chunk.device
        )
        out[0] += chunk.sum()
        out[1] += (chunk * index).sum()
    return out


def digest_pairs(tensors: list[torch.Tensor], offsets: list[int]) -> torch.Tensor:
    """``digest_pair`` of many tensors, ``[n, 2]``, with a fixed number of kernels
    per group of small tensors (one concatenation, segment sums) instead of a few
    per tensor: a model's parameters or a batch's trajectories cost a handful of
    device calls, not hundreds. On the CPU a call costs no launch, and the
    segment sums' extra passes over memory are what is slow there: each tensor is
    digested on its own (20 ms against 190 ms for 6 M values in 46 tensors here)."""
    out = [None] * len(tensors)
    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        if _on_cpu(t.device):
            out[i] = digest_pair(t, offsets[i])
        else:
            groups.setdefault((t.device, _bits(t).dtype), []).append(i)
    for members in groups.values():
        batch: list[int] = []
        total = 0
        for i in [*members, None]:
            n = tensors[i].numel() if i is not None else 0
            if batch and (i is None or total + n > _CHUNK):
                for j, pair in zip(batch, _segment_digests(tensors, offsets, batch)):
                    out[j] = pair
                batch, total = [], 0
            if i is None:
                break
            if n > _CHUNK:
                out[i] = digest_pair(tensors[i], offsets[i])
            else:
                batch.append(i)
                total += n
    if not out:
        return torch.zeros((0, 2), dtype=torch.int64)
    return torch.stack(out)


def _segment_digests(tensors, offsets, batch: list[int]) -> torch.Tensor:
    """The digests of ``batch``'s tensors, concatenated, as differences of prefix
    sums: the sum over a segment is ``prefix[end] - prefix[start]``, which wraps
    modulo 2**64 as the sum itself does. A scatter into a few segments
    (``index_add_``) serialises on a GPU's atomics: it took 24 s of a 37 s step
    for the weights and gradients of a 1.5B-parameter model on an H200."""
    bits = torch.cat([_bits(tensors[i]) for i in batch]).to(torch.int64)
    device = bits.device
    sizes = torch.tensor([tensors[i].numel() for i in batch], device=device)
    ends = torch.cumsum(sizes, 0)
    starts = ends - sizes
    s1 = _segment_sums(bits, starts, ends)
    s2 = _segment_sums(bits * torch.arange(bits.numel(), device=device), starts, ends)
    # Element j of a segment is at position start + j of the concatenation and
    # has index offset + j + 1: sum(b * index) = sum(b * position) + (offset +
    # 1 - start) * sum(b).
    first = torch.tensor([offsets[i] + 1 for i in batch], device=device)
    return torch.stack([s1, s2 + (first - starts) * s1], 1)


def _segment_sums(x: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor):
    prefix = torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])
    return prefix[ends] - prefix[starts]


def digest_hex(pair) -> str:
    """The printable digest: 32 hex digits (s1 then s2, unsigned)."""
    s1, s2 = (int(v) & _MASK for v in pair)
    return f"{s1:016x}{s2:016x}"


@dataclass
class StageEntry:
    """One tensor of one stage, before the step's single transfer to the host."""

    pair: torch.Tensor
    # A magnitude to say "by how much" without the tensor: a loss value, a grad norm.
    # Sums of squares for sharded tensors (summed across ranks, square-rooted later).
    sumsq: torch.Tensor | None = None
    value: torch.Tensor | None = None


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
        entry = StageEntry(digest_pair(t, offset))
        if norm:
            entry.sumsq = t.detach().double().pow(2).sum()
        if value:
            entry.value = t.detach().double().reshape(-1)[:1].sum()
        self.entries.setdefault(stage, {})[name] = entry
        if stage in self.keep:
            self.tensors[(stage, name)] = t.detach().to("cpu", copy=True)
        self.seconds += time.perf_counter() - t0

    def adopt(self, other: StageLog) -> None:
        """Take ``other``'s digests (and its time) into this log: a stage
        digested on its own, once, that belongs to this step too."""
        for stage, names in other.entries.items():
            self.entries.setdefault(stage, {}).update(names)
        self.tensors.update(other.tensors)
        self.seconds += other.seconds

    def keep_only(self, stage: str, name: str, t: torch.Tensor) -> None:
        """Keep ``t`` beside the stage's kept tensors, undigested: what identifies
        a row (its tokens), not a result a replay compares."""
        if stage in self.keep:
            self.tensors[(stage, name)] = t.detach().to("cpu", copy=True)

    def add_many(
        self,
        stage: str,
        items: list[tuple[str, torch.Tensor, int]],
        *,
        norm: bool = False,
    ) -> None:
        """``add`` for many ``(name, tensor, offset)`` at once (see digest_pairs)."""
        if not items:
            return
        t0 = time.perf_counter()
        tensors = [t for _, t, _ in items]
        pairs = digest_pairs(tensors, [o for _, _, o in items])
        sumsqs = _sums_of_squares(tensors) if norm else [None] * len(items)
        names = self.entries.setdefault(stage, {})
        for (name, t, _), pair, sumsq in zip(items, pairs, sumsqs):
            names[name] = StageEntry(pair, sumsq=sumsq)
            if stage in self.keep:
                self.tensors[(stage, name)] = t.detach().to("cpu", copy=True)
        self.seconds += time.perf_counter() - t0

    def to_host(self) -> dict[str, dict[str, list]]:
        """Plain values, one device-to-host transfer: ``{stage: {name: [hex, norm|
        value|None]}}``; global stages carry ``[s1, s2, sumsq]`` still to be summed."""
        flat: list[tuple[str, str, StageEntry]] = [
            (s, n, e) for s, names in self.entries.items() for n, e in names.items()
        ]
        if not flat:
            return {}
        t0 = time.perf_counter()
        pairs = torch.stack([e.pair for _, _, e in flat]).cpu().tolist()
        nums = torch.stack([_magnitude(e) for _, _, e in flat]).cpu().tolist()
        out: dict[str, dict[str, list]] = {}
        for (stage, name, entry), pair, num in zip(flat, pairs, nums):
            has_num = entry.sumsq is not None or entry.value is not None
            if stage in GLOBAL_STAGES:
                out.setdefault(stage, {})[name] = [*pair, num if has_num else None]
            else:
                out.setdefault(stage, {})[name] = [
                    digest_hex(pair),
                    _finish(entry, num) if has_num else None,
                ]
        self.seconds += time.perf_counter() - t0
        return out


def _sums_of_squares(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's sum of squares in float64, one reduction each. Not one
    reduction over a concatenation, as the digests: that needs a float64 copy of
    every tensor at once (12 GB for a 1.5B-parameter model's gradients) and a
    scatter into segments, which GPUs serialise."""
    out = []
    for t in tensors:
        x = t.detach()
        if _on_cpu(x.device):
            flat = x.double().reshape(-1)
            out.append(torch.dot(flat, flat))  # one pass: no squares kept
        else:
            # Squared in float64 inside the reduction: no float64 copy of ``x``.
            out.append(torch.linalg.vector_norm(x, dtype=torch.float64).square())
    return out


def _magnitude(entry: StageEntry) -> torch.Tensor:
    for t in (entry.sumsq, entry.value):
        if t is not None:
            return t.to(device=entry.pair.device, dtype=torch.float64)
    return torch.zeros((), dtype=torch.float64, device=entry.pair.device)


def _finish(entry: StageEntry, num: float) -> float:
    return math.sqrt(num) if entry.sumsq is not None else num


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
                acc[0] = (acc[0] + s1) & _MASK
                acc[1] = (acc[1] + s2) & _MASK
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
