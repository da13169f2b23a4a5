# SPDX-License-Identifier: Apache-2.0
"""Per-token views of a step: the trainer's kept stage tensors paired with the
recorded rows they were computed for, and the tokens where the trainer's
log-probs are furthest from the inference engine's (``mismatch --top``).

AReaL reorders and redistributes rows before the trainer sees them, so a row's
position in a stage tensor says nothing about which recorded row it is: each
kept row carries its tokens (``"... trajectory i tokens"``), and rows are paired
by them. The trainer's value at position p is that of token p+1 (AReaL's labels
are the inputs rolled by -1); the engine's log-prob at p is that of token p.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from areal_debug.recording.format import RecordingError
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.layers import sample_tokens, token_key
from areal_debug.stages.names import StageTensorKey, tokens_index, trajectory_name

# Where a recorded row sits in the step's batch: (group, row).
Place = tuple[int, int]
# Tokens of context shown before a token of the worst list.
CONTEXT_TOKENS = 8


@dataclass
class StageRows:
    """The kept stage tensors of a step, paired with the recorded rows."""

    # {(group, row): {stage: the trainer's values of that row}}
    values: dict[Place, dict[str, torch.Tensor]] = field(default_factory=dict)
    # {(rank, trajectory index, row in it): (group, row)}, for the replay's
    # first divergent token.
    places: dict[tuple[int, int, int], Place] = field(default_factory=dict)
    note: str | None = None


def stage_rows(
    reader: RecordingReader, step: int, batch: list, stages: tuple[str, ...]
) -> StageRows:
    """The kept per-token tensors of ``stages`` at ``step``, each row paired with
    the recorded row it was computed for by its tokens (kept beside it), on any
    number of ranks."""
    try:
        _, tensors = reader.recorded_stages(step)
    except RecordingError as e:
        return StageRows(note=f"stage tensors not read: {e}")
    if not tensors:
        return StageRows()
    keys = []
    for text in tensors:
        try:
            keys.append(StageTensorKey.parse(text))
        except ValueError:
            continue
    token_keys = sorted(
        (k for k in keys if tokens_index(k.name) is not None),
        key=lambda k: (k.stage, k.rank, tokens_index(k.name)),
    )
    if not token_keys:
        return StageRows(
            note="this recording kept stage tensors without the tokens of each row "
            "(an older areal-debug): they cannot be paired with the recorded "
            "rows, so they are not shown per token"
        )
    recorded = recorded_rows(batch)
    # Each stage pairs every recorded row once (rows with the same tokens in turn).
    queues: dict[str, dict[bytes, list[Place]]] = {}
    out = StageRows()
    for key in token_keys:
        stage, index = key.stage, tokens_index(key.name)
        if stage not in stages:
            continue
        name = StageTensorKey(key.rank, stage, trajectory_name(index)).format()
        values, ids = tensors.get(name), tensors[key.format()]
        if values is None or values.shape != ids.shape or ids.dim() != 2:
            continue
        waiting = queues.setdefault(stage, {k: list(v) for k, v in recorded.items()})
        for j in range(ids.shape[0]):
            queue = waiting.get(token_key(ids[j][ids[j] >= 0]))
            if not queue:
                continue
            place = queue.pop(0)
            out.values.setdefault(place, {})[stage] = values[j]
            out.places[(key.rank, index, j)] = place
    return out


def recorded_rows(batch: list) -> dict[bytes, list[Place]]:
    """{tokens: the recorded rows with exactly those tokens, in batch order}."""
    rows: dict[bytes, list[Place]] = {}
    for g, traj in enumerate(batch):
        for r, tokens in enumerate(sample_tokens(traj)):
            rows.setdefault(token_key(tokens), []).append((g, r))
    return rows


# -- the worst tokens ------------------------------------------------------------------
@dataclass(frozen=True)
class WorstToken:
    """One loss token where the trainer's log-prob is far from the engine's."""

    step: int
    group: int  # the trajectory dict in the step's batch (a prompt's samples)
    row: int  # the sampled answer in it
    position: int  # the token's position in the row
    token: int
    engine: float  # the log-prob the inference engine reported
    trainer: float  # the log-prob the trainer computed before its first update
    delta: float  # trainer - engine
    context: str = ""  # the tokens before it, then the token in [[ ]]

    @property
    def link(self) -> str:
        """The page's link to its trajectory (one numbering: step, group, sample)."""
        return page_link(self.step, self.group, self.row)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "link": self.link}


def page_link(step: int, group: int, sample: int) -> str:
    """The fragment that opens a trajectory in the report page: the page, the CLI
    and the JSON name a trajectory by step, group (the trajectory dict: a prompt
    and its samples, in the step's batch) and sample (its row)."""
    return f"#step={step}&group={group}&sample={sample}"


@dataclass
class WorstTokens:
    tokens: list[WorstToken]
    # Steps whose trainer log-probs were not kept, and why.
    notes: list[str] = field(default_factory=list)


def worst_tokens(
    reader: RecordingReader, steps: list[int], n: int, decode=None
) -> WorstTokens:
    """The ``n`` loss tokens of ``steps`` with the largest |trainer - engine|,
    worst first; ``decode(ids) -> str`` writes their context (ids without)."""
    # (|d|, where: the tie-break, the token, its row's ids for the context).
    heap: list[tuple[float, tuple, WorstToken, torch.Tensor]] = []
    missing = []
    for step in steps:
        batch = reader.load_batch(step)
        paired = stage_rows(reader, step, batch, ("logp",))
        if not paired.values:
            missing.append(step)
            continue
        for (g, r), values in paired.values.items():
            for token, row_ids in _row_deltas(step, batch[g], g, r, values["logp"]):
                where = (-step, -g, -r, -token.position)
                item = (abs(token.delta), where, token, row_ids)
                if len(heap) < n:
                    heapq.heappush(heap, item)
                elif item[:2] > heap[0][:2]:
                    heapq.heapreplace(heap, item)
    ranked = sorted(heap, key=lambda i: i[:2], reverse=True)
    worst = [_with_context(row_ids, t, decode) for _, _, t, row_ids in ranked]
    notes = []
    if missing:
        from areal_debug.recording.reader import format_ranges

        notes.append(
            f"Steps {format_ranges(missing)} kept no per-token trainer log-probs "
            "(the step's mismatch statistics are there without them). A dump keeps "
            "them with debug.record_trainer_logp=true (the default), "
            "debug.stage_digests=true and actor.recompute_logprob=true."
        )
    return WorstTokens(worst, notes)


def row_loss_tokens(
    traj: dict, r: int, trainer: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(positions, engine log-probs, trainer log-probs) of row ``r``'s loss
    tokens, in float64; None where the row has none or lacks a field."""
    engine, mask = traj.get("logprobs"), traj.get("loss_mask")
    if not all(isinstance(t, torch.Tensor) for t in (engine, mask)):
        return None
    engine, mask = (t.reshape(1, -1) if t.dim() == 1 else t for t in (engine, mask))
    width = min(trainer.shape[-1] + 1, engine.shape[-1])
    # Token p is predicted at the trainer's position p - 1: position 0 has none.
    picked = mask[r, 1:width].bool().nonzero().reshape(-1) + 1
    if picked.numel() == 0:
        return None
    return picked, engine[r, picked].double(), trainer[picked - 1].double()


def _row_deltas(step: int, traj: dict, g: int, r: int, trainer: torch.Tensor):
    """The row's loss tokens with their engine and trainer log-probs, each
    with the row's ids (a view: the context of the few kept)."""
    ids = traj.get("input_ids")
    found = row_loss_tokens(traj, r, trainer)
    if found is None or not isinstance(ids, torch.Tensor):
        return
    ids = ids.reshape(1, -1) if ids.dim() == 1 else ids
    picked, eng, trn = found
    delta = trn - eng
    for p, e, t, d in zip(picked.tolist(), eng.tolist(), trn.tolist(), delta.tolist()):
        yield WorstToken(step, g, r, p, int(ids[r, p]), e, t, d), ids[r]


# -- per-token figures of a step -------------------------------------------------------
@dataclass(frozen=True)
class TokenFigures:
    """What only the per-token values give: the importance ratio's percentiles
    (AReaL's statistics reduce to avg/min/max across ranks) and the worst row."""

    tokens: int  # loss tokens paired with a recorded row
    ratio_p50: float  # median of exp(d) over those tokens, before any clamp
    ratio_p99: float
    worst_group: int  # the row holding the token with the largest |d|
    worst_row: int
    worst_abs_diff: float


def token_figures(reader: RecordingReader, step: int) -> TokenFigures | None:
    """The step's per-token figures from its kept trainer log-probs; None where
    none were kept."""
    batch = reader.load_batch(step)
    paired = stage_rows(reader, step, batch, ("logp",))
    deltas, worst = [], (-1.0, (0, 0))
    for (g, r), values in sorted(paired.values.items()):
        found = row_loss_tokens(batch[g], r, values["logp"])
        if found is None:
            continue
        d = found[2] - found[1]
        deltas.append(d)
        top = float(d.abs().max())
        if top > worst[0]:
            worst = (top, (g, r))
    if not deltas:
        return None
    ratio = torch.exp(torch.cat(deltas)).sort().values
    return TokenFigures(
        int(ratio.numel()),
        _quantile(ratio, 0.5),
        _quantile(ratio, 0.99),
        *worst[1],
        worst[0],
    )


def _quantile(ordered: torch.Tensor, q: float) -> float:
    """``torch.quantile``'s linear interpolation, on sorted values of any count
    (torch.quantile refuses more than 16M: a step of 1024 x 16k tokens)."""
    at = q * (ordered.numel() - 1)
    low = int(at)
    high = min(low + 1, ordered.numel() - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (at - low))


def _with_context(row_ids: torch.Tensor, token: WorstToken, decode) -> WorstToken:
    before = row_ids[max(0, token.position - CONTEXT_TOKENS) : token.position]
    show = decode or (lambda xs: " ".join(f"<{i}>" for i in xs))
    context = f"{show(before.tolist())}[[{show([token.token])}]]"
    return WorstToken(**{**asdict(token), "context": context})
