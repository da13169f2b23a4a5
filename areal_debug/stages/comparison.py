# SPDX-License-Identifier: Apache-2.0
"""Where a replayed step first differs from the recording, stage by stage.

Both sides are the merged form ``stage_digest.merge_global`` writes: per-rank
stages (log-probs, advantages, losses) compared rank by rank when the layout is
the same, global stages (gradients, weights) compared parameter by parameter
on any layout. Stages are walked in the order a PPO step runs them; the first
one with a differing digest is the step's divergent stage, and ``where`` names
the first trajectory, micro-batch or parameter in it that differs.
"""

from __future__ import annotations

from typing import Any

import torch

from areal_debug.stages.names import GLOBAL_STAGES, STAGES, StageTensorKey

IDENTICAL, DIFFERS = "identical", "differs"


def compare_stages(
    recorded: dict[str, Any] | None,
    replayed: dict[str, Any],
    same_layout: bool,
    recorded_tensors: dict[str, torch.Tensor] | None = None,
    replayed_tensors: dict[str, torch.Tensor] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{stage: {"status", "compared", "differing", "where", ...}}`` in step order,
    for every stage either side has (the committed stats are compared elsewhere)."""
    if recorded is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for stage in STAGES:
        if stage in GLOBAL_STAGES:
            rec = recorded.get("global", {}).get(stage)
            rep = replayed.get("global", {}).get(stage)
            if rec is None and rep is None:
                continue
            out[stage] = _compare_entries(stage, rec or {}, rep or {})
            continue
        rec_ranks = [r.get(stage) for r in recorded.get("ranks", [])]
        rep_ranks = [r.get(stage) for r in replayed.get("ranks", [])]
        if not any(rec_ranks) and not any(rep_ranks):
            continue
        if not same_layout or len(rec_ranks) != len(rep_ranks):
            out[stage] = {
                "status": "not_compared",
                "reason": "the layout changed; per-rank stages are compared only "
                "on the dump run's layout (gradients and weights still are)",
            }
            continue
        out[stage] = _compare_ranks(
            stage, rec_ranks, rep_ranks, recorded_tensors, replayed_tensors
        )
    return out


def _compare_ranks(stage, rec_ranks, rep_ranks, rec_t, rep_t) -> dict[str, Any]:
    result: dict[str, Any] = {"status": IDENTICAL, "compared": 0, "differing": 0}
    for rank, (rec, rep) in enumerate(zip(rec_ranks, rep_ranks)):
        part = _compare_entries(stage, rec or {}, rep or {})
        result["compared"] += part["compared"]
        result["differing"] += part["differing"]
        if part["status"] != IDENTICAL and result["status"] == IDENTICAL:
            result["status"] = part["status"]
            result["rank"] = rank
            first = part["where"]
            result["where"] = f"rank {rank} {first}" if len(rec_ranks) > 1 else first
            for key in ("recorded", "replayed", "abs_diff"):
                if key in part:
                    result[key] = part[key]
            diff = _tensor_difference(stage, first, rank, rec_t, rep_t)
            if diff:
                result.update(diff)
    return result


def _compare_entries(stage: str, rec: dict, rep: dict) -> dict[str, Any]:
    result: dict[str, Any] = {"status": IDENTICAL, "compared": 0, "differing": 0}
    for name in list(rec) + [n for n in rep if n not in rec]:
        result["compared"] += 1
        a, b = rec.get(name), rep.get(name)
        if a is not None and b is not None and a[0] == b[0]:
            continue
        result["differing"] += 1
        if result["status"] != IDENTICAL:
            continue
        result["status"] = DIFFERS
        result["where"] = name
        if a is None or b is None:
            result["missing_in"] = "replay" if b is None else "recording"
        elif a[1] is not None and b[1] is not None:
            # A loss value, or a gradient's norm: says by how much.
            result["recorded"], result["replayed"] = a[1], b[1]
            result["abs_diff"] = abs(a[1] - b[1])
    return result


def _tensor_difference(stage, name, rank, rec_t, rep_t) -> dict[str, Any]:
    """Max absolute and relative difference, and where, when both sides kept the
    full tensor (debug.record_stage_tensors)."""
    key = StageTensorKey(rank, stage, name).format()
    if not rec_t or not rep_t or key not in rec_t or key not in rep_t:
        return {}
    a, b = rec_t[key].double(), rep_t[key].double()
    if a.shape != b.shape:
        return {"shape_recorded": list(a.shape), "shape_replayed": list(b.shape)}
    diff = (a - b).abs()
    if diff.numel() == 0:
        return {}
    flat = int(torch.nan_to_num(diff, nan=float("inf")).reshape(-1).argmax())
    position = list(torch.unravel_index(torch.tensor(flat), a.shape))
    rel = diff / a.abs().clamp_min(torch.finfo(torch.float64).tiny)
    return {
        "max_abs_diff": float(diff.reshape(-1)[flat]),
        "max_rel_diff": float(rel.max()),
        "position": [int(p) for p in position],
    }


def first_divergent_stage(stages: dict[str, dict[str, Any]]) -> str | None:
    for stage in STAGES:
        if stages.get(stage, {}).get("status") == DIFFERS:
            return stage
    return None


def describe(step: int, stages: dict[str, dict[str, Any]]) -> str:
    """One line: what matched, and where each differing stage first differs."""
    parts = []
    for stage in (s for s in STAGES if s in stages):
        r = stages[stage]
        status = r["status"]
        if status == IDENTICAL:
            parts.append(f"{stage} identical")
        elif status == "not_compared":
            parts.append(f"{stage} not compared (layout changed)")
        elif stage == "grads":
            parts.append(
                f"first parameter whose gradient differs: {r['where']}"
                + _by(r, "norm")
                + f" ({r['differing']} of {r['compared']} gradients differ)"
            )
        elif stage == "weights":
            parts.append(
                f"weights differ in {r['differing']} of {r['compared']} parameters, "
                f"first {r['where']}"
            )
        else:
            where = r["where"]
            parts.append(f"{stage} differs first at {where}{_by(r)}")
    return f"step {step}: " + "; ".join(parts) if parts else f"step {step}: no stages"


def _by(r: dict[str, Any], what: str = "") -> str:
    if "max_abs_diff" in r:
        return (
            f" (max abs diff {r['max_abs_diff']:.3g}, rel {r['max_rel_diff']:.3g} "
            f"at {r['position']})"
        )
    if "abs_diff" in r:
        label = f"{what} " if what else ""
        return f" ({label}differs by {r['abs_diff']:.3g})"
    return ""
