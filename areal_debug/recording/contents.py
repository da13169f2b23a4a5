# SPDX-License-Identifier: Apache-2.0
"""What each sample of a batch holds, digested: its prompt, its completion, its
reward and the policy versions that generated it.

Kept in each shard's metadata at dump time (``contents`` in ``shard-NNNNN.json``
and in ``step.json``'s ``shards``, docs/format.md), so that comparing two
recordings, or the attempts of a resumed run, reads a few bytes per sample
rather than the payloads. A recording made before the metadata held them has
them computed from its payloads by the same function, so the two always agree.

A sample is a row of a trajectory dict (AReaL's group: a prompt and its
samples, or one sample per dict), numbered as everywhere else: step, group (the
dict's index in the step's batch), sample (the row).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Hex digits kept of each sha256: 64 bits, no collision in any run's prompts.
DIGEST_HEX = 16

# The columns of ``contents``, one entry per sample.
COLUMNS = ("prompt", "completion", "reward", "first_version", "last_version")


def token_digest(ids: np.ndarray) -> str:
    """The digest of token ids, whatever their integer dtype (int32 in AReaL's
    batches, int64 elsewhere): the same ids give the same digest."""
    return hashlib.sha256(ids.astype("int64", copy=False).tobytes()).hexdigest()[
        :DIGEST_HEX
    ]


@dataclass(frozen=True)
class BatchContents:
    """A batch's samples, column by column (flat, in batch order), and how many
    samples each trajectory dict holds."""

    rows: tuple[int, ...]  # samples per trajectory dict
    prompt: tuple[str, ...]  # tokens in the attention mask, outside the loss mask
    completion: tuple[str, ...]  # tokens in the attention and loss masks
    # None where the dict has no reward per sample; a non-finite one by name.
    reward: tuple[float | str | None, ...]
    first_version: tuple[int | None, ...]  # over generated tokens; None: no versions
    last_version: tuple[int | None, ...]

    @property
    def num_samples(self) -> int:
        return len(self.prompt)

    def where(self) -> list[tuple[int, int]]:
        """(group, sample) of each sample, in batch order."""
        return [(g, s) for g, n in enumerate(self.rows) for s in range(n)]

    def group_prompts(self) -> list[str]:
        """Each trajectory dict's prompt (its first sample's), in batch order."""
        out, at = [], 0
        for n in self.rows:
            if n:
                out.append(self.prompt[at])
            at += n
        return out

    @classmethod
    def of_batch(cls, batch: list[dict[str, Any]]) -> BatchContents:
        rows, columns = [], [[] for _ in COLUMNS]
        for traj in batch:
            samples = _samples(traj) if isinstance(traj, dict) else []
            rows.append(len(samples))
            for sample in samples:
                for column, value in zip(columns, sample):
                    column.append(value)
        return cls(tuple(rows), *(tuple(c) for c in columns))

    @classmethod
    def joined(cls, parts: list[BatchContents]) -> BatchContents:
        """The shards' contents in head order: the step's global batch."""
        return cls(
            *(
                tuple(v for part in parts for v in getattr(part, name))
                for name in ("rows", *COLUMNS)
            )
        )

    @classmethod
    def of_json(cls, obj: dict[str, Any]) -> BatchContents:
        """From ``to_json``'s form, already checked (``schema.check_contents``)."""
        return cls(tuple(obj["rows"]), *(tuple(obj[n]) for n in COLUMNS))

    def to_json(self) -> dict[str, Any]:
        return {"rows": list(self.rows), **{n: list(getattr(self, n)) for n in COLUMNS}}


def _samples(traj: dict[str, Any]) -> list[tuple]:
    """One dict's samples: (prompt, completion, reward, first, last version).
    numpy per row, not torch: this runs for every sample of every recorded step.
    (torch is imported here, with the payload, as the reader does: metadata
    alone is read by commands that never load a payload.)"""
    import torch

    ids = traj.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() == 0:
        return []
    ids = (ids if ids.dim() > 1 else ids.unsqueeze(0)).detach().cpu()
    shape = ids.shape
    attention = _mask(traj, "attention_mask", shape, True)
    loss = _mask(traj, "loss_mask", shape, False)
    ids_np = ids.numpy()
    prompt_keep, completion_keep = attention & ~loss, attention & loss
    rewards = _per_row(traj.get("rewards"), shape[0])
    versions = traj.get("versions")
    versions = (
        versions.detach().cpu().reshape(shape).numpy()
        if isinstance(versions, torch.Tensor) and versions.numel() == ids.numel()
        else None
    )
    out = []
    for r in range(shape[0]):
        first = last = None
        if versions is not None:
            generated = versions[r][completion_keep[r]]
            generated = generated[generated >= 0]
            if generated.size:
                first, last = int(generated.min()), int(generated.max())
        out.append(
            (
                token_digest(ids_np[r][prompt_keep[r]]),
                token_digest(ids_np[r][completion_keep[r]]),
                rewards[r],
                first,
                last,
            )
        )
    return out


def _mask(traj: dict, key: str, shape, default: bool) -> np.ndarray:
    import numpy as np
    import torch

    mask = traj.get(key)
    if isinstance(mask, torch.Tensor) and mask.numel() == shape.numel():
        return mask.detach().cpu().reshape(shape).numpy() != 0
    return np.full(tuple(shape), default)


def _per_row(rewards: Any, num_rows: int) -> list[float | str | None]:
    """One reward per sample: a tensor of one value per row, or one for all."""
    import torch

    if not isinstance(rewards, torch.Tensor) or rewards.numel() not in (1, num_rows):
        return [None] * num_rows
    values = rewards.detach().cpu().reshape(-1).double().tolist()
    values = values * num_rows if len(values) == 1 else values
    # JSON has no NaN a strict reader accepts: a non-finite reward is kept as
    # its name, so two NaN rewards still compare equal.
    return [v if math.isfinite(v) else str(v) for v in values]
