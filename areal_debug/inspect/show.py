# SPDX-License-Identifier: Apache-2.0
"""``areal-debug show``: one recorded step, trajectory by trajectory."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.inspect.common import InspectError, first_line
from areal_debug.recording.format import RecordingError
from areal_debug.recording.reader import RecordingReader, format_ranges

# The keys of AReaL's RLVR trajectories; any other is summarised by ``summary``.
RLVR_KEYS = frozenset(
    ("input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards")
)
# A tensor this small is shown whole.
SMALL = 8


@dataclass
class SequenceView:
    """One sampled answer of a trajectory (a row of its tensors)."""

    row: int
    prompt_tokens: int
    completion_tokens: int
    reward: float | None
    # Policy versions of the generated tokens (min, max); None without `versions`.
    versions: tuple[int, int] | None
    # Steps between the policy that generated a token and the one training on it.
    staleness: tuple[int, int] | None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    prompt_text: str | None = None
    completion_text: str | None = None


@dataclass
class TrajectoryView:
    """One trajectory dict of the batch: usually a prompt and its group of answers."""

    index: int  # in the step's global batch (shards concatenated in head order)
    shard: int
    index_in_shard: int
    keys: dict[str, str]
    sequences: list[SequenceView]
    reward_mean: float | None
    reward_std: float | None
    reward_min: float | None
    reward_max: float | None
    # Other plain values the workflow stored (task ids, tool calls...).
    extras: dict[str, Any] = field(default_factory=dict)
    # Each key beyond AReaL's RLVR ones (routed_experts, a sampling seed...),
    # summarised: recorded and replayed as they are, so shown as they are.
    other: dict[str, str] = field(default_factory=dict)


@dataclass
class StepView:
    recording: str
    step: int
    num_shards: int
    num_trajectories: int
    num_tokens: int
    policy_version: tuple[int, int] | None
    tokenizer: str | None
    stats: dict[str, float] | None
    trajectories: list[TrajectoryView]


def tokenizer_path_of(reader: RecordingReader) -> str | None:
    """The run's tokenizer as its recorded config names it."""
    cfg = reader.manifest.config
    return cfg.get("tokenizer_path") or (cfg.get("actor") or {}).get("path")


def load_tokenizer(path: str | None):
    """A Hugging Face tokenizer from ``path``, or one error saying how to give one."""
    if not path:
        raise InspectError(
            "The recording's config names no tokenizer (tokenizer_path, actor.path). "
            "Give one with --tokenizer PATH, or show the step without --decode."
        )
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - any loading failure has the same fix
        first = first_line(e)
        raise InspectError(
            f"Cannot load the tokenizer {path}: {first}. The recorded run's model may "
            "live on another machine; pass --tokenizer PATH (a directory with the "
            "tokenizer files or a Hugging Face name), or show without --decode."
        ) from e


def _select(reader: RecordingReader, step: int, shard: int | None):
    """(shard, index in shard, trajectory) of the step, optionally one shard only."""
    shards = range(reader.step_meta(step).num_shards)
    if shard is not None:
        if shard not in shards:
            raise InspectError(
                f"Step {step} has shards 0-{len(shards) - 1}, not {shard}. Omit "
                "--shard to see the whole step."
            )
        shards = [shard]
    for s in shards:
        for i, traj in enumerate(reader.load_shard(step, s)):
            yield s, i, traj


def check_step(reader: RecordingReader, step: int) -> None:
    """One clear error when ``step`` is not a complete step of the recording."""
    if not reader.has_step(step):
        have = reader.available_steps()
        raise InspectError(
            f"Step {step} is not a complete step of {reader.path} (complete steps: "
            f"{format_ranges(have)}). Choose one of those."
        )


def view_step(
    path: str,
    step: int,
    *,
    shard: int | None = None,
    trajectories: list[int] | None = None,
    decode: bool = False,
    tokenizer: str | None = None,
) -> StepView:
    """What step ``step`` of the recording at ``path`` holds, per trajectory."""
    reader = RecordingReader(path)
    check_step(reader, step)
    meta = reader.step_meta(step)
    tok_path = tokenizer or tokenizer_path_of(reader)
    tok = load_tokenizer(tok_path) if decode else None
    views, global_index = [], 0
    for s, i, traj in _select(reader, step, shard):
        index = global_index if shard is None else i
        global_index += 1
        if trajectories is not None and index not in trajectories:
            continue
        views.append(trajectory_view(traj, step, s, i, index, tok))
    if trajectories is not None:
        missing = sorted(set(trajectories) - {v.index for v in views})
        if missing:
            raise InspectError(
                f"Step {step} has {global_index} trajectories (0-{global_index - 1}"
                f"{' in shard ' + str(shard) if shard is not None else ''}); "
                f"{format_ranges(missing)} do not exist."
            )
    return StepView(
        recording=os.path.abspath(path),
        step=step,
        num_shards=meta.num_shards,
        num_trajectories=meta.num_trajectories,
        num_tokens=meta.num_tokens,
        policy_version=meta.policy_version,
        tokenizer=tok_path if decode else None,
        stats=reader.recorded_stats(step),
        trajectories=views,
    )


def trajectory_view(
    traj: dict[str, Any], step: int, shard: int, local: int, index: int, tok
) -> TrajectoryView:
    """One trajectory's sequences, rewards and versions (texts with ``tok``)."""
    if not isinstance(traj, dict):
        raise RecordingError(
            f"Trajectory {local} of shard {shard}, step {step} is a "
            f"{type(traj).__name__}, not a dict: not an AReaL rollout batch."
        )
    keys = {
        k: (str(v.dtype).removeprefix("torch.") + str(list(v.shape)))
        if isinstance(v, torch.Tensor)
        else type(v).__name__
        for k, v in traj.items()
    }
    extras = {
        k: v
        for k, v in traj.items()
        if not isinstance(v, torch.Tensor) and isinstance(v, str | int | float | bool)
    }
    ids = _rows(traj.get("input_ids"))
    n = len(ids)
    attn = _rows(traj.get("attention_mask"), n)
    loss = _rows(traj.get("loss_mask"), n)
    versions = _rows(traj.get("versions"), n)
    rewards = traj.get("rewards")
    reward_list = (
        [float(x) for x in rewards.reshape(-1).tolist()]
        if isinstance(rewards, torch.Tensor)
        else None
    )
    seqs = []
    for r in range(n):
        seqs.append(
            _sequence(
                r,
                ids[r],
                attn[r],
                loss[r],
                versions[r],
                reward_list[r] if reward_list and r < len(reward_list) else None,
                step,
                tok,
            )
        )
    finite = [x for x in reward_list or [] if math.isfinite(x)]
    mean = sum(finite) / len(finite) if finite else None
    std = (
        math.sqrt(sum((x - mean) ** 2 for x in finite) / len(finite))
        if finite
        else None
    )
    return TrajectoryView(
        index=index,
        shard=shard,
        index_in_shard=local,
        keys=keys,
        sequences=seqs,
        reward_mean=mean,
        reward_std=std,
        reward_min=min(finite) if finite else None,
        reward_max=max(finite) if finite else None,
        extras=extras,
        other={k: summary(v) for k, v in traj.items() if k not in RLVR_KEYS},
    )


def summary(value: Any) -> str:
    """A value in one line: a tensor's dtype, shape and values (all of them when
    few, else their range, distinct count or mean, and any NaN or inf)."""
    if not isinstance(value, torch.Tensor):
        text = repr(value)
        return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
    head = f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
    flat = value.detach().reshape(-1).cpu()
    if flat.numel() == 0:
        return f"{head}: empty"
    if flat.numel() <= SMALL:
        return f"{head}: {flat.tolist()}"
    if not flat.is_floating_point():
        lo, hi = int(flat.min()), int(flat.max())
        return f"{head}: {lo} to {hi}, {flat.unique().numel()} distinct"
    finite = flat[torch.isfinite(flat)].double()
    odd = flat.numel() - finite.numel()
    if finite.numel() == 0:
        return f"{head}: no finite value ({odd} NaN or inf)"
    text = (
        f"{head}: {float(finite.min()):.4g} to {float(finite.max()):.4g}, "
        f"mean {float(finite.mean()):.4g}"
    )
    return text + (f", {odd} NaN or inf" if odd else "")


def _rows(t, n: int | None = None) -> list[list[int] | None]:
    """A [g, L] (or [L]) tensor as g lists; ``[None] * n`` without a tensor."""
    if not isinstance(t, torch.Tensor):
        return [None] * (n or 0)
    t = t if t.dim() > 1 else t.unsqueeze(0)
    rows = [row.tolist() for row in t]
    return rows if n is None or len(rows) == n else (rows + [None] * n)[:n]


def _sequence(r, ids, attn, loss, versions, reward, step, tok) -> SequenceView:
    ids = ids or []
    valid = [bool(a) for a in attn] if attn is not None else [True] * len(ids)
    generated = [bool(m) for m in loss] if loss is not None else [False] * len(ids)
    prompt_ids = [t for t, v, g in zip(ids, valid, generated) if v and not g]
    completion_ids = [t for t, v, g in zip(ids, valid, generated) if v and g]
    gen_versions = (
        [int(v) for v, g, ok in zip(versions, generated, valid) if g and ok and v >= 0]
        if versions is not None
        else []
    )
    vrange = (min(gen_versions), max(gen_versions)) if gen_versions else None
    stale = (step - vrange[1], step - vrange[0]) if vrange else None
    view = SequenceView(
        row=r,
        prompt_tokens=len(prompt_ids),
        completion_tokens=len(completion_ids),
        reward=reward,
        versions=vrange,
        staleness=stale,
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
    )
    if tok is not None:
        view.prompt_text = tok.decode(prompt_ids, skip_special_tokens=False)
        view.completion_text = tok.decode(completion_ids, skip_special_tokens=False)
    return view
