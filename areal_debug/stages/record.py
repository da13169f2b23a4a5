# SPDX-License-Identifier: Apache-2.0
"""One rank's stages of one step, as its probes hand them over.

Built by ``StageProbes.take``, gathered over the ranks (``all_gather_object`` in
SPMD mode; in single-controller mode also across AReaL's RPC, as ``to_dict``'s
plain values) and read by the mode that records or compares them.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.stages.names import StageTensorKey


@dataclass(frozen=True)
class StageRecord:
    """One rank's step: digests, the tensors kept in full, the digesting cost."""

    # {stage: {name: [...]}} as StageLog.to_host gives them; None: they failed.
    digests: dict[str, dict[str, list]] | None
    # The stages kept in full (debug.record_stage_tensors), by (stage, name).
    tensors: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict)
    # Seconds spent digesting.
    seconds: float = 0.0
    # The reference model's forward passes (None: no reference engine here).
    ref_forwards: int | None = None

    @classmethod
    def empty(cls) -> StageRecord:
        """Nothing digested yet: the start of a union of engines' records."""
        return cls({})

    def keyed_tensors(self, rank: int) -> dict[str, torch.Tensor]:
        """The kept tensors as ``stage_tensors.pt`` names them, for rank ``rank``."""
        return {
            StageTensorKey(rank, stage, name).format(): t
            for (stage, name), t in self.tensors.items()
        }

    def union(self, other: StageRecord) -> StageRecord:
        """Two engines' records of one rank as one (their stages differ); no
        digests if either has none."""
        failed = self.digests is None or other.digests is None
        forwards = [f for f in (self.ref_forwards, other.ref_forwards) if f is not None]
        return StageRecord(
            None if failed else {**self.digests, **other.digests},
            {**self.tensors, **other.tensors},
            self.seconds + other.seconds,
            sum(forwards) if forwards else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values for an RPC: AReaL's serializes lists, dicts, strings and
        numbers, not this class; the tensors travel as ``encode_tensors`` text, so
        that AReaL's RPC does not keep them on the worker as RTensors."""
        return {
            "digests": self.digests,
            "tensors": encode_tensors(self.tensors),
            "seconds": float(self.seconds),
            "ref_forwards": self.ref_forwards,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageRecord:
        """``to_dict`` undone."""
        return cls(
            data["digests"],
            decode_tensors(data["tensors"]),
            float(data["seconds"]),
            data["ref_forwards"],
        )


def encode_tensors(tensors: dict) -> str:
    """A dict of tensors as text (``torch.save``, base64)."""
    if not tensors:
        return ""
    buf = io.BytesIO()
    torch.save(tensors, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_tensors(text: str) -> dict:
    """``encode_tensors`` undone, with ``weights_only`` loading."""
    if not text:
        return {}
    data = base64.b64decode(text.encode("ascii"))
    return torch.load(io.BytesIO(data), weights_only=True)
