# SPDX-License-Identifier: Apache-2.0
"""Below the log-probs: the first layer, sample and token where two runs part.

Both sides are a step's per-rank ``layers`` entries (``stages/layers.py``:
``"trajectory T sample S <module>"`` -> digest) and, where they were cheap
enough to keep, each entry's per-token digests. Modules are walked in the order
the forward pass ran them (the order of their first entry: a layer's norm, its
attention, its second norm, its MLP, the layer, the next layer's ..., the final
norm, the logits); the first module with a differing sample is where the
difference starts, its first differing sample (by trajectory, sample, rank) the
sequence, and the first differing per-token digest the token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from areal_debug.stages.layers import sample_tokens, token_key
from areal_debug.stages.names import (
    LAYERS_STAGE,
    StageTensorKey,
    Verdict,
    split_layer_entry,
    tokens_name,
)

# (rank, trajectory, sample) -> {module: digest}
_Side = dict[tuple[int, int, int], dict[str, str]]
# (rank, trajectory, sample) -> the recorded batch's (group, sample), or None.
PlaceOf = Callable[[int, int, int], "tuple[int, int] | None"]


def compare_layers(
    recorded_ranks: list[dict],
    replayed_ranks: list[dict],
    recorded_tensors: dict[str, torch.Tensor] | None = None,
    replayed_tensors: dict[str, torch.Tensor] | None = None,
    place_of: PlaceOf | None = None,
) -> dict[str, Any] | None:
    """``{"status", "compared", "differing", "module", "where", ...}``; None when
    neither side digested the layers of the step. ``place_of`` names a sample
    in the recorded batch's numbering (group, sample), where it can."""
    rec_order, rec, rec_names = _side(recorded_ranks)
    rep_order, rep, rep_names = _side(replayed_ranks)
    if not rec and not rep:
        return None
    if not rec or not rep:
        return {
            "status": Verdict.NOT_COMPARED,
            "reason": f"the {'recording' if not rec else 'replay'} has no layer "
            "digests of this step",
        }
    order = rec_order + [m for m in rep_order if m not in rec_order]
    samples = sorted(set(rec) | set(rep), key=lambda k: (k[1], k[2], k[0]))
    result: dict[str, Any] = {
        "status": Verdict.IDENTICAL,
        "compared": 0,
        "differing": 0,
    }
    first: tuple[str, tuple[int, int, int]] | None = None
    for module in order:
        for key in samples:
            a, b = rec.get(key, {}).get(module), rep.get(key, {}).get(module)
            result["compared"] += 1
            if a is not None and a == b:
                continue
            result["differing"] += 1
            if first is None:
                first = (module, key)
                if a is None or b is None:
                    result["missing_in"] = "replay" if b is None else "recording"
    if first is None:
        result["modules"] = len(order)
        return result
    module, (rank, trajectory, sample) = first
    result.update(
        status=Verdict.DIFFERS,
        module=module,
        rank=rank,
        trajectory=trajectory,
        sample=sample,
        modules=len(order),
    )
    token = _first_token(
        rank,
        rec_names.get((rank, trajectory, sample, module)),
        rep_names.get((rank, trajectory, sample, module)),
        recorded_tensors,
        replayed_tensors,
    )
    if token is not None:
        result["token"] = token
    on_rank = f"rank {rank} " if len(recorded_ranks) > 1 else ""
    sequence = f"the trainer's {on_rank}trajectory {trajectory} row {sample}"
    place = place_of(rank, trajectory, sample) if place_of is not None else None
    if place is not None:
        result["group"], result["group_sample"] = place
        sequence = f"group {place[0]} sample {place[1]} ({sequence})"
    result["where"] = f"{module}, {sequence}" + (
        f", token {token}" if token is not None else ""
    )
    return result


def batch_places(batch: list, tensors: dict[str, torch.Tensor] | None) -> PlaceOf:
    """``PlaceOf`` from the recorded ``batch`` and the recording's kept tokens of
    each trajectory the trainer's log-probs were computed for (``"rank R/logp/
    trajectory T tokens"``, -1 outside the mask): a row is found by its tokens,
    as AReaL reorders rows before the trainer sees them."""
    rows: dict[bytes, tuple[int, int]] = {}
    for g, traj in enumerate(batch):
        for r, tokens in enumerate(sample_tokens(traj)):
            rows.setdefault(token_key(tokens), (g, r))

    def place_of(rank: int, trajectory: int, sample: int) -> tuple[int, int] | None:
        key = StageTensorKey(rank, "logp", tokens_name(trajectory)).format()
        ids = (tensors or {}).get(key)
        if ids is None or ids.dim() != 2 or sample >= ids.shape[0]:
            return None
        row = ids[sample]
        return rows.get(token_key(row[row >= 0]))

    return place_of


def _side(ranks: list[dict]) -> tuple[list[str], _Side, dict[tuple, str]]:
    """The modules in the order the forward pass ran them, each sample's
    digests by module, and each (rank, trajectory, sample, module)'s entry name."""
    order: dict[str, int] = {}
    side: _Side = {}
    names: dict[tuple, str] = {}
    for rank, stages in enumerate(ranks):
        for name, value in ((stages or {}).get(LAYERS_STAGE) or {}).items():
            parsed = split_layer_entry(name)
            if parsed is None or not isinstance(value, list) or not value:
                continue
            trajectory, sample, position, module = parsed
            order.setdefault(module, position)
            side.setdefault((rank, trajectory, sample), {})[module] = value[0]
            names[(rank, trajectory, sample, module)] = name
    return sorted(order, key=order.__getitem__), side, names


def _first_token(rank: int, rec_name, rep_name, rec_t, rep_t) -> int | None:
    """The first token whose per-token digests differ, where both sides kept
    them (the sequence's token positions: prompt, then completion)."""
    if rec_name is None or rep_name is None:
        return None
    a = (rec_t or {}).get(StageTensorKey(rank, LAYERS_STAGE, rec_name).format())
    b = (rep_t or {}).get(StageTensorKey(rank, LAYERS_STAGE, rep_name).format())
    if a is None or b is None:
        return None
    n = min(a.shape[0], b.shape[0])
    differs = (a[:n] != b[:n]).reshape(n, -1).any(1).nonzero()
    if differs.numel():
        return int(differs[0])
    return n if a.shape[0] != b.shape[0] else None
