# SPDX-License-Identifier: Apache-2.0
"""The per-step part of ``areal-debug report``: each step's trajectories as rows
of plain values, with their tokens, log-probabilities and group statistics.

Unlike ``show`` (:mod:`areal_debug.inspect.show`), which turns every row of a step
into Python lists, this works on whole tensors and lists only the rows the page
keeps: a 512 x 2k-token step would otherwise cost seconds in ``tolist`` alone.
A "trajectory" here is one sampled answer (a row of a trajectory dict); its
"group" is the dict it belongs to (one prompt and its samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.inspect.tokens import Place, row_loss_tokens, stage_rows
from areal_debug.recording.format import RecordingError
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.names import Verdict, trajectory_index

# Texts kept per prompt and completion (the token view holds the tokens shown).
MAX_TEXT_CHARS = 4000
# The per-token stages the token view shows when the recording kept them
# (debug.record_stage_tensors, debug.record_ref_logp).
TOKEN_VIEW_STAGES = ("logp", "ref_logp")


@dataclass
class Decoder:
    """Turns token ids into text: a tokenizer's, or ``<id>`` without one."""

    tokenizer: Any = None
    # Every token id shown, with its text (filled as rows are kept).
    pieces: dict[int, str] = field(default_factory=dict)

    def text(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(f"<{i}>" for i in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def remember(self, ids: list[int]) -> None:
        new = [i for i in set(ids) if i not in self.pieces]
        for i in new:
            self.pieces[i] = (
                self.tokenizer.decode([i], skip_special_tokens=False)
                if self.tokenizer is not None
                else f"<{i}>"
            )


@dataclass
class StepLimits:
    max_per_step: int  # trajectories (rows) kept per step; 0 keeps all
    max_tokens: int  # completion tokens kept per trajectory for the token view


def step_detail(
    reader: RecordingReader,
    step: int,
    limits: StepLimits,
    decoder: Decoder,
    divergence: dict[str, Any] | None = None,
    only: set[tuple[int, int]] | None = None,
    blame: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Step ``step`` as the page shows it when the step is clicked; ``divergence``
    is the replay report's first divergent stage when it is this step's; with
    ``only``, the rows kept are those (group, sample), whatever the limit;
    ``blame``: the step's sample parts (``stages/sample_parts.py``), each row's
    shares beside it."""
    meta = reader.step_meta(step)
    batch = reader.load_batch(step)
    shares = _placed_shares(blame, batch)
    paired = stage_rows(reader, step, batch, TOKEN_VIEW_STAGES)
    kept, stage_note = paired.values, paired.note
    marked = _divergent_place(divergence, paired.places)
    layer = _divergent_layer(divergence)
    rows, groups, prompts, total = [], [], [], 0
    for g, traj in enumerate(batch):
        if not isinstance(traj, dict):
            raise RecordingError(
                f"Trajectory {g} of step {step} is a {type(traj).__name__}, not a "
                "dict: not an AReaL rollout batch."
            )
        summary = _group_summary(traj, step)
        groups.append(_group_entry(g, summary, step))
        for r in range(summary["n"]):
            keep = (
                (g, r) in only
                if only is not None
                else limits.max_per_step <= 0 or len(rows) < limits.max_per_step
            )
            if keep:
                row = _row(traj, summary, g, r, step, limits, decoder, prompts)
                row["i"] = total
                positions = summary["body"][r].nonzero().reshape(-1)
                _add_stage_values(row, kept.get((g, r)), positions)
                _add_worst_delta(row, traj, r, kept.get((g, r)))
                if marked is not None and marked[0] == (g, r):
                    _mark_token(row, positions, marked[1])
                if layer is not None and layer[0] == (g, r):
                    row["divergent_layer"] = layer[1]
                if (g, r) in shares:
                    row["grad_share"] = plain(shares[(g, r)].get("grad_share"))
                    row["loss_share"] = plain(shares[(g, r)].get("loss_share"))
                rows.append(row)
            total += 1
    return {
        "step": step,
        "epoch": meta.epoch,
        "num_trajectories": total,
        "num_groups": len(batch),
        "num_tokens": meta.num_tokens,
        "policy_version": meta.policy_version,
        "left_out": total - len(rows),
        "rows": rows,
        "groups": groups,
        "prompts": prompts,
        "stage_note": stage_note,
        "blame": _blame_summary(blame) if blame else None,
    }


# The samples a blamed step names at its top.
TOP_SAMPLES = 5


def _placed_shares(
    blame: dict[str, Any] | None, batch: list
) -> dict[tuple[int, int], dict[str, Any]]:
    """The blamed samples placed in the recorded batch (``attach_recorded``), by
    (group, sample); empty for a step not blamed."""
    if not blame:
        return {}
    from areal_debug.stages import sample_parts

    sample_parts.attach_recorded(blame["samples"], batch)
    return {(p["group"], p["sample"]): p for p in blame["samples"] if "group" in p}


def _blame_summary(blame: dict[str, Any]) -> dict[str, Any]:
    """What the page says of a blamed step: its top samples by |grad share|, the
    shares' sums and, where the step is not finite, where it came from."""
    from areal_debug.stages import sample_parts

    placed = [p for p in blame["samples"] if "group" in p]
    top = sample_parts.ranked(placed)[:TOP_SAMPLES]
    finite = sample_parts.step_is_finite(blame)
    origin = None if finite else sample_parts.origin(placed)
    return {
        "top": [
            {
                "group": p["group"],
                "sample": p["sample"],
                "grad_share": plain(p.get("grad_share")),
                "loss_share": plain(p.get("loss_share")),
            }
            for p in top
        ],
        "grad_share_sum": plain(sum(p.get("grad_share") or 0.0 for p in placed)),
        "origin": origin and {k: origin[k] for k in ("group", "sample", "entered")},
    }


def _group_summary(traj: dict[str, Any], step: int) -> dict[str, Any]:
    """Per-row lengths, rewards and policy versions of one trajectory dict, at once."""
    ids = traj.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        return {"n": 0, "rewards": []}
    ids = ids if ids.dim() > 1 else ids.unsqueeze(0)
    n = ids.shape[0]
    valid = _mask(traj.get("attention_mask"), ids, True)
    generated = _mask(traj.get("loss_mask"), ids, False) & valid
    # The prompt is what comes before the first loss token; after it, tokens
    # outside the loss (a tool's output, an observation in a multi-turn
    # episode) stay in place in the completion, dimmed, not moved to the prompt.
    after = generated.to(torch.int8).cummax(-1).values.bool()
    prompt = valid & ~after
    body = valid & after
    rewards = traj.get("rewards")
    reward_list = (
        [float(x) for x in rewards.reshape(-1).tolist()][:n]
        if isinstance(rewards, torch.Tensor)
        else []
    )
    versions = traj.get("versions")
    # Per row [lowest, highest] version over its generated tokens (None where it
    # has none); None for a dict without versions.
    spans = None
    if isinstance(versions, torch.Tensor) and versions.shape == ids.shape:
        usable = generated & (versions >= 0)
        big = torch.iinfo(torch.int64).max
        v = versions.to(torch.int64)
        lows = torch.where(usable, v, big).amin(-1).tolist()
        highs = torch.where(usable, v, -1).amax(-1).tolist()
        spans = [None if hi < 0 else [lo, hi] for lo, hi in zip(lows, highs)]
    return {
        "n": n,
        "ids": ids,
        "prompt": prompt,
        "generated": generated,
        "body": body,
        "prompt_len": prompt.sum(-1).tolist(),
        "completion_len": generated.sum(-1).tolist(),
        "rewards": reward_list,
        "versions": spans,
    }


def _group_entry(g: int, s: dict[str, Any], step: int) -> dict[str, Any]:
    """A group as the group view shows it: every sample's reward, completion
    length and staleness (kept on the page or not), and whether the rewards
    spread at all (GRPO learns nothing from a group whose rewards are equal)."""
    entry = {"group": g, **_moments(s["rewards"])}
    if not s["n"]:
        return entry
    spans = s["versions"]
    finite = [x for x in s["rewards"] if math.isfinite(x)]
    entry.update(
        rewards=[plain(x) for x in s["rewards"]],
        completion_len=s["completion_len"],
        staleness=None if spans is None else [_staleness(step, v) for v in spans],
        no_spread=len(finite) > 1 and max(finite) == min(finite),
    )
    return entry


def _mask(t, ids: torch.Tensor, default: bool) -> torch.Tensor:
    if isinstance(t, torch.Tensor) and t.numel() == ids.numel():
        return t.reshape(ids.shape).bool()
    return torch.full(ids.shape, default, dtype=torch.bool)


def _moments(rewards: list[float]) -> dict[str, Any]:
    finite = [x for x in rewards if math.isfinite(x)]
    if not finite:
        return {"n": len(rewards), "mean": None, "std": None}
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((x - mean) ** 2 for x in finite) / len(finite))
    return {"n": len(rewards), "mean": mean, "std": std}


def _row(traj, s, g, r, step, limits, decoder, prompts) -> dict[str, Any]:
    """One kept trajectory: texts, lengths, reward, versions, tokens and log-probs."""
    prompt_ids = s["ids"][r][s["prompt"][r]].tolist()
    body = s["body"][r]
    completion_ids = s["ids"][r][body].tolist()
    # Shown tokens outside the loss: dimmed in place, in no figure.
    outside = (~s["generated"][r][body]).nonzero().reshape(-1).tolist()
    text = _clip(decoder.text(prompt_ids))
    if not prompts or prompts[-1] != text:  # a group shares its prompt
        prompts.append(text)
    shown = (
        completion_ids[: limits.max_tokens] if limits.max_tokens > 0 else completion_ids
    )
    decoder.remember(shown)
    logprobs = traj.get("logprobs")
    lp = (
        _milli(logprobs.reshape(s["ids"].shape)[r][body][: len(shown)].tolist())
        if isinstance(logprobs, torch.Tensor) and logprobs.numel() == s["ids"].numel()
        else None
    )
    masked = [k for k in outside if k < len(shown)]
    if lp is not None:
        for k in masked:
            lp[k] = None
    versions = s["versions"][r] if s["versions"] is not None else None
    reward = s["rewards"][r] if r < len(s["rewards"]) else None
    return {
        "group": g,
        "row": r,
        "prompt": len(prompts) - 1,
        "completion": _clip(decoder.text(completion_ids)),
        "reward": plain(reward),
        "prompt_len": s["prompt_len"][r],
        "completion_len": s["completion_len"][r],
        "versions": versions,
        "staleness": _staleness(step, versions),
        "tokens": shown,
        "masked": masked,
        "tokens_left_out": len(completion_ids) - len(shown),
        "logp": lp,
    }


def _staleness(step: int, versions: list[int] | None) -> list[int] | None:
    """[least, most] steps behind ``step`` of a row's [lowest, highest] version."""
    return None if versions is None else [step - versions[1], step - versions[0]]


def plain(value: float | None) -> float | str | None:
    """A number as JSON holds it: a non-finite one by name (JSON has none)."""
    return value if value is None or math.isfinite(value) else str(value)


def finite_or_text(values: dict[str, float]) -> dict[str, Any]:
    """Statistics by name as JSON holds them (``plain``), which the page marks."""
    return {k: plain(v) for k, v in values.items()}


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + f" … ({len(text) - MAX_TEXT_CHARS} more characters)"


def _milli(values: list[float]) -> list[int | None]:
    """Log-probs in thousandths (ints: a third of the page's bytes of floats)."""
    return [round(v * 1000) if math.isfinite(v) else None for v in values]


# -- kept stage tensors --------------------------------------------------------------
def _add_stage_values(row, stage_values, positions: torch.Tensor) -> None:
    """The kept stage tensors' values on the row's shown completion tokens
    (``positions``: where its completion tokens sit in the row). The trainer's
    value at position p is that of token p+1 (AReaL's labels are the inputs
    rolled by -1), so token p reads position p-1 (a token at position 0, which
    nothing predicts, has none)."""
    at = (positions[: len(row["tokens"])] - 1).tolist()
    masked = set(row.get("masked", ()))
    for stage, values in (stage_values or {}).items():
        width = values.shape[-1]
        picked = [
            values[p].item() if 0 <= p < width and k not in masked else math.nan
            for k, p in enumerate(at)
        ]
        row[f"stage_{stage}"] = _milli(picked)


def _add_worst_delta(row, traj: dict, r: int, stage_values) -> None:
    """The row's loss token whose trainer log-prob is furthest from the engine's:
    d = trainer - engine there, over all its loss tokens (not only those shown),
    so the table sorts rows by their worst token."""
    trainer = (stage_values or {}).get("logp")
    found = row_loss_tokens(traj, r, trainer) if trainer is not None else None
    if found is None:
        return
    d = found[2] - found[1]
    worst = float(d[d.abs().argmax()])
    row["worst_delta"] = worst if math.isfinite(worst) else str(worst)


def _divergent_place(
    divergence: dict[str, Any] | None, places: dict[tuple[int, int, int], Place]
) -> tuple[Place, int] | None:
    """((group, row), token position) where the replay report's first divergent
    per-token stage differs most (its ``position``: the row and column in the
    named trajectory's tensor, whose column p is token p+1); None otherwise."""
    if not divergence or divergence.get("stage") not in TOKEN_VIEW_STAGES:
        return None
    position = divergence.get("position")
    where = str(divergence.get("where", ""))
    if not (isinstance(position, list) and len(position) == 2):
        return None
    rank = 0
    if where.startswith("rank "):
        head, _, where = where.removeprefix("rank ").partition(" ")
        if not head.isdigit():
            return None
        rank = int(head)
    index = trajectory_index(where)
    place = places.get((rank, index, position[0])) if index is not None else None
    return (place, position[1] + 1) if place is not None else None


def _divergent_layer(
    divergence: dict[str, Any] | None,
) -> tuple[tuple[int, int], dict[str, Any]] | None:
    """((group, sample), {"module", "token"?}) where the replay's divergent
    log-probs first differ below, in the layers (``compare_layers``), when
    the report named the sample in the recorded batch's numbering."""
    if not divergence or divergence.get("stage") != "logp":
        return None
    layers = divergence.get("layers")
    if not (isinstance(layers, dict) and layers.get("status") == Verdict.DIFFERS):
        return None
    if "group" not in layers or "group_sample" not in layers:
        return None
    where = {"module": layers["module"]}
    if "token" in layers:
        where["token"] = layers["token"]
    return (layers["group"], layers["group_sample"]), where


def _mark_token(row: dict[str, Any], positions: torch.Tensor, col: int) -> None:
    hits = (positions == col).nonzero().reshape(-1).tolist()
    if hits and hits[0] < len(row["tokens"]):
        row["divergent_token"] = hits[0]
