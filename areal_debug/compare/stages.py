# SPDX-License-Identifier: Apache-2.0
"""Where a replayed step first differs from the recording, stage by stage.

Both sides are the merged form ``stage_digest.merge_global`` writes: per-rank
stages (log-probs, advantages, losses) compared rank by rank when the layout is
the same, global stages (gradients, weights) compared parameter by parameter
on any layout. Stages are walked in the order a PPO step runs them, the update
mini-batch by mini-batch (``names.step_order``: the loss, gradients and weights
of mini-batch 0, then of mini-batch 1, ...); the first one with a differing
digest is the step's divergent stage, ``where`` names the first trajectory,
micro-batch or parameter in it that differs and ``mini_batch`` the mini-batch of
an update stage's.

A recording made before the weights were digested per mini-batch has them once,
after the update (no ``WEIGHTS_PER_MINI_BATCH`` in its stages.json): its weights
are compared with the replay's after its last mini-batch, the same tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from areal_debug.compare.layers import PlaceOf, compare_layers
from areal_debug.stages.names import (
    GLOBAL_STAGES,
    MODEL_STAGE,
    STAGES,
    UPDATE_STAGES,
    WEIGHTS_PER_MINI_BATCH,
    StageTensorKey,
    Verdict,
    split_mini_batch,
    step_order,
)


def compare_stages(
    recorded: dict[str, Any] | None,
    replayed: dict[str, Any],
    same_layout: bool,
    recorded_tensors: dict[str, torch.Tensor] | None = None,
    replayed_tensors: dict[str, torch.Tensor] | None = None,
    place_of: PlaceOf | None = None,
) -> dict[str, dict[str, Any]]:
    """``{stage: {"status", "compared", "differing", "where", ...}}`` in step order,
    for every stage either side has (the committed stats are compared elsewhere);
    the layers under the log-probs in its ``"layers"`` (``compare_layers``, its
    samples named by ``place_of`` where given)."""
    if recorded is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for stage in STAGES:
        if stage in GLOBAL_STAGES:
            rec = recorded.get("global", {}).get(stage)
            rep = replayed.get("global", {}).get(stage)
            if rec is None and rep is None:
                continue
            if stage == MODEL_STAGE and (rec is None or rep is None):
                continue  # each run digests the model at its own first step only
            rec, rep, after_update = _in_common(stage, recorded, replayed, rec, rep)
            out[stage] = _compare_entries(stage, rec, rep)
            if after_update:
                out[stage]["after_update"] = after_update
            continue
        rec_ranks = [r.get(stage) for r in recorded.get("ranks", [])]
        rep_ranks = [r.get(stage) for r in replayed.get("ranks", [])]
        if not any(rec_ranks) and not any(rep_ranks):
            continue
        if not same_layout or len(rec_ranks) != len(rep_ranks):
            out[stage] = {
                "status": Verdict.NOT_COMPARED,
                "reason": "the layout changed; per-rank stages are compared only "
                "on the dump run's layout (gradients and weights still are)",
            }
            continue
        out[stage] = _compare_ranks(
            stage, rec_ranks, rep_ranks, recorded_tensors, replayed_tensors
        )
    _absent_advantages(out)
    if same_layout and "logp" in out:
        _below_logp(
            out["logp"],
            recorded,
            replayed,
            recorded_tensors,
            replayed_tensors,
            place_of,
        )
    return out


def _absent_advantages(out: dict[str, dict[str, Any]]) -> None:
    """A pure-distillation step (its ``mopd`` stage) computes no advantages: said,
    not left out without a word."""
    if "mopd" in out and "advantages" not in out:
        out["advantages"] = {
            "status": Verdict.ABSENT,
            "reason": "pure distillation: AReaL's prepare_mopd_batch prepares the "
            "batch in place of compute_advantages",
        }


def _below_logp(result: dict, recorded, replayed, rec_t, rep_t, place_of) -> None:
    """The layers under the log-probs (``compare_layers``) where either side
    digested them: ``result["layers"]``, and where both the log-probs and a layer
    differ, ``result["below"]``: the first layer, sample and token."""
    layers = compare_layers(
        recorded.get("ranks", []), replayed.get("ranks", []), rec_t, rep_t, place_of
    )
    if layers is None:
        return
    result["layers"] = layers
    if layers["status"] == Verdict.DIFFERS and result["status"] == Verdict.DIFFERS:
        result["below"] = layers["where"]


def compare_model(
    step: int,
    replayed: dict[str, list],
    recorded_step: dict[str, Any] | None,
    recorded_before: dict[str, Any] | None,
) -> dict[str, Any]:
    """The replay's weights as its first step ``step`` starts (merged "model"
    digests) against the recording's: the dump run's own "model" digests when
    that run started at ``step`` too, else the weights after the update of step
    ``step - 1`` (what a kept checkpoint restored). ``against`` says which;
    status ``not_compared`` (with ``reason``) when the recording has neither."""
    recorded, against = start_weights(step, recorded_step, recorded_before)
    if recorded is None:
        return {
            "status": Verdict.NOT_COMPARED,
            "reason": f"the recording keeps no digest of the weights step {step} "
            "starts from (made by an earlier areal-debug, or with "
            "debug.stage_digests=false)",
        }
    result = compare_weights(recorded, replayed)
    result["against"] = against
    return result


def start_weights(
    step: int,
    recorded_step: dict[str, Any] | None,
    recorded_before: dict[str, Any] | None,
) -> tuple[dict[str, list] | None, str]:
    """The digests of the weights a recorded ``step`` started from, and which
    they are: its run's own "model" digests where the run started there, else
    the weights after the update of ``step - 1``; (None, "") where neither is
    kept."""
    own = (recorded_step or {}).get("global", {}).get(MODEL_STAGE)
    if own is not None:
        return own, f"the weights the dump run started step {step} from"
    weights = (recorded_before or {}).get("global", {}).get("weights")
    if step > 0 and weights is not None:
        if recorded_before.get(WEIGHTS_PER_MINI_BATCH):
            weights = _after_update(weights)
        return weights, f"the dump run's weights after step {step - 1}"
    return None, ""


def compare_weights(a: dict[str, list], b: dict[str, list]) -> dict[str, Any]:
    """Two sets of whole-model digests, parameter by parameter."""
    return _compare_entries(MODEL_STAGE, a, b)


def weights_verdict(result: dict[str, Any]) -> tuple[str, str]:
    """``compare_weights``' or ``compare_model``'s result as (status, detail):
    how many parameters are identical, or how many differ and the first."""
    if result["status"] == Verdict.NOT_COMPARED:
        return Verdict.NOT_COMPARED, result.get("reason", "")
    if result["status"] == Verdict.IDENTICAL:
        return Verdict.IDENTICAL, f"{result['compared']} parameters identical"
    return Verdict.DIFFERS, (
        f"{result['differing']} of {result['compared']} parameters differ, first "
        f"{result['where']}"
    )


# The reason given when the weights are compared after the update only.
_ONCE_PER_STEP = "the {} digested the weights once per step, after the update"


def _in_common(stage: str, recorded, replayed, rec, rep) -> tuple[dict, dict, str]:
    """A global stage's entries of both sides in the form both have: the weights
    per mini-batch, or after the update (the last mini-batch's, by parameter)
    when one side is a recording made before they were digested per mini-batch;
    then why."""
    rec, rep = rec or {}, rep or {}
    if stage != "weights":
        return rec, rep, ""
    rec_per = bool(recorded.get(WEIGHTS_PER_MINI_BATCH))
    rep_per = bool(replayed.get(WEIGHTS_PER_MINI_BATCH))
    if rec_per == rep_per:
        return rec, rep, ""
    if rec_per:
        return _after_update(rec), rep, _ONCE_PER_STEP.format("replay")
    return rec, _after_update(rep), _ONCE_PER_STEP.format("recording")


def _after_update(entries: dict[str, list]) -> dict[str, list]:
    """Per-mini-batch weights as one digest per parameter: the last mini-batch's."""
    named = [(split_mini_batch(name), value) for name, value in entries.items()]
    last = max((mb for (mb, _), _ in named if mb is not None), default=None)
    return {rest: value for (mb, rest), value in named if mb == last}


def _compare_ranks(stage, rec_ranks, rep_ranks, rec_t, rep_t) -> dict[str, Any]:
    result: dict[str, Any] = {
        "status": Verdict.IDENTICAL,
        "compared": 0,
        "differing": 0,
    }
    differing = []
    for rank, (rec, rep) in enumerate(zip(rec_ranks, rep_ranks)):
        part = _compare_entries(stage, rec or {}, rep or {})
        result["compared"] += part["compared"]
        result["differing"] += part["differing"]
        if part["status"] != Verdict.IDENTICAL:
            differing.append((part.get("mini_batch", -1), rank, part))
    if not differing:
        return result
    # The rank that differs first in the step: the earliest mini-batch, then rank.
    _, rank, part = min(differing, key=lambda d: d[:2])
    result["status"] = part["status"]
    result["rank"] = rank
    first = part["where"]
    result["where"] = f"rank {rank} {first}" if len(rec_ranks) > 1 else first
    for key in ("mini_batch", "missing_in", "recorded", "replayed", "abs_diff"):
        if key in part:
            result[key] = part[key]
    diff = _tensor_difference(stage, first, rank, rec_t, rep_t)
    if diff:
        result.update(diff)
    return result


def _compare_entries(stage: str, rec: dict, rep: dict) -> dict[str, Any]:
    result: dict[str, Any] = {
        "status": Verdict.IDENTICAL,
        "compared": 0,
        "differing": 0,
    }
    names = list(rec) + [n for n in rep if n not in rec]
    if stage in UPDATE_STAGES:
        # Mini-batch by mini-batch, as the step runs (a name only one side has too).
        names.sort(key=lambda n: _mini_batch_or(n, -1))
    for name in names:
        result["compared"] += 1
        a, b = rec.get(name), rep.get(name)
        if a is not None and b is not None and a[0] == b[0]:
            continue
        result["differing"] += 1
        if result["status"] != Verdict.IDENTICAL:
            continue
        result["status"] = Verdict.DIFFERS
        result["where"] = name
        mini_batch = _mini_batch_or(name, None) if stage in UPDATE_STAGES else None
        if mini_batch is not None:
            result["mini_batch"] = mini_batch
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


def _mini_batch_or(name: str, default):
    mini_batch, _ = split_mini_batch(name)
    return default if mini_batch is None else mini_batch


def first_divergent_stage(stages: dict[str, dict[str, Any]]) -> str | None:
    """The stage the step first differs in (``step_order``), or None."""
    for stage in step_order(stages):
        if stages[stage].get("status") == Verdict.DIFFERS:
            return stage
    return None


def first_between(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, dict | None]:
    """Two runs' own digests of one step (two replays, same layout): how many
    stages compared, and the first that differs (``{"stage", **result}``, its
    layers under the log-probs included), None when none does."""
    compared = compare_stages(a, b, same_layout=True)
    for stage in step_order(compared):
        if compared[stage].get("status") == Verdict.DIFFERS:
            return len(compared), {"stage": stage, **compared[stage]}
    return len(compared), None


def first_place(first: dict[str, Any]) -> str:
    """Where in its stage ``first_between``'s (or a report's first divergent
    stage) differs, and below the log-probs, where in the model."""
    below = f"; below it, first at {first['below']}" if first.get("below") else ""
    return f"{first.get('where', '?')}{below}"


def describe(step: int, stages: dict[str, dict[str, Any]]) -> str:
    """One line, in the order the step reaches them (``step_order``): what
    matched, and where each differing stage first differs."""
    parts = []
    for stage in step_order(stages):
        r = stages[stage]
        status = r["status"]
        if status == Verdict.IDENTICAL:
            parts.append(f"{stage} identical")
        elif status == Verdict.NOT_COMPARED:
            parts.append(f"{stage} not compared (layout changed)")
        elif status == Verdict.ABSENT:
            parts.append(f"{stage} absent in this step ({r['reason']})")
        elif stage == "grads":
            parts.append(
                f"first parameter whose gradient differs: {r['where']}"
                + _by(r, "norm")
                + f" ({r['differing']} of {r['compared']} gradients differ)"
            )
        elif stage == "weights" and r.get("after_update"):
            parts.append(
                f"weights after the update differ in {r['differing']} of "
                f"{r['compared']} parameters, first {r['where']} ({r['after_update']})"
            )
        elif stage == "weights":
            parts.append(
                f"weights differ first at {r['where']} ({r['differing']} of "
                f"{r['compared']} parameter digests after a mini-batch differ)"
            )
        else:
            where = r["where"]
            below = f"; below it, first at {r['below']}" if r.get("below") else ""
            parts.append(f"{stage} differs first at {where}{_by(r)}{below}")
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
