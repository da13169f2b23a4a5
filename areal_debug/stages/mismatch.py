# SPDX-License-Identifier: Apache-2.0
"""The training–inference mismatch of a step, measured where the trainer computes
it: the log-probs the actor recomputes for the recorded tokens (AReaL's proximal
log-probs, before the step's first optimizer step) against the log-probs the
inference engine reported for the same tokens.

Per token t of the loss (AReaL's ``loss_mask``; never prompt or padding tokens),
with ``d = trainer - engine`` (log-probs of the same token): ``abs_diff`` |d|,
``k1`` -d, ``k2`` d^2/2 and ``k3`` exp(d) - 1 - d (the three estimates of
KL(engine || trainer) from the engine's samples), ``ratio`` exp(d) (the importance
ratio before any clamp), ``over_log<c>`` for c in 1.5, 2, 3, 5, 10 (|d| above
log c: the ratio outside [1/c, c], R3's extreme-token fraction, as AReaL's own
``ratio_outside_<c>``) and ``nonfinite`` (a log-prob of either side not finite).
AReaL's trainer exports each as avg, min and max over the step's loss tokens of
every data-parallel rank (``areal_debug/mismatch/<name>/<avg|min|max>``, tokens
counted in ``areal_debug/mismatch/n_tokens``), so they are recorded, replayed and
compared with the step's other statistics, logged wherever AReaL logs, and can
pin a step (``debug.anomaly_thresholds``).
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from areal_debug.stages import train_infer

SCOPE = train_infer.OURS
TOKENS = train_infer.TOKENS
# The ratio's tails: exp(d) outside [1/c, c], i.e. |d| > log c, at AReaL main's
# ppo_actor/train_infer/ratio_outside_<c> thresholds.
TAILS = train_infer.TAILS
# The statistics, in the order tables show them.
NAMES = (
    "abs_diff",
    "k1",
    "k2",
    "k3",
    "ratio",
    *(f"over_log{c}" for c in TAILS),
    "nonfinite",
)


def stat_name(name: str, reduce: str = "avg") -> str:
    """The committed statistic of ``name`` (``reduce``: avg, min or max)."""
    return f"{SCOPE}/{name}/{reduce}"


TOKENS_STAT = f"{SCOPE}/{TOKENS}"


def token_deltas(
    trajectories: list[dict[str, Any]], trainer_logps: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(d, mask), flat over every token of every trajectory: d = trainer - engine
    at each position, mask the loss tokens. AReaL's recomputed log-prob at
    position t is that of token t+1 (its labels are the inputs rolled by -1), as
    are the engine's log-probs and the loss mask once AReaL rolls them by -1
    (trainer/ppo/actor.py, ``torch.roll(data["logprobs"], shifts=-1)``): the
    same roll here pairs each token with itself. None where the batch carries no
    engine log-probs or no loss mask."""
    deltas, masks = [], []
    for traj, logp in zip(trajectories, trainer_logps, strict=False):
        if not isinstance(traj, dict) or not isinstance(logp, torch.Tensor):
            return None
        engine, mask = traj.get("logprobs"), traj.get("loss_mask")
        if not isinstance(engine, torch.Tensor) or not isinstance(mask, torch.Tensor):
            return None
        if engine.shape != logp.shape or mask.shape != logp.shape:
            return None
        engine = torch.roll(engine, shifts=-1, dims=-1).to(logp.device)
        mask = torch.roll(mask, shifts=-1, dims=-1).to(logp.device).bool()
        deltas.append((logp.float() - engine.float()).reshape(-1))
        masks.append(mask.reshape(-1))
    if not deltas:
        return None
    return torch.cat(deltas), torch.cat(masks)


def token_stats(d: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every per-token statistic of ``d`` (zero outside ``mask``, where nothing
    reads it: a placeholder log-prob of a token the engine never generated would
    otherwise count tens of nats)."""
    # d is not finite where either log-prob is not (inf - inf, nan - x).
    nonfinite = (mask & ~torch.isfinite(d)).float()
    d = torch.where(mask, d, torch.zeros_like(d))
    a = d.abs()
    return {
        "abs_diff": a,
        "k1": -d,
        "k2": d * d / 2,
        "k3": torch.expm1(d) - d,
        "ratio": torch.exp(d),
        **{f"over_log{c}": (a > math.log(float(c))).float() for c in TAILS},
        "nonfinite": nonfinite,
    }


def record(trajectories: Any, trainer_logps: Any) -> bool:
    """Measure one ``compute_logp`` call's mismatch into AReaL's statistics of the
    step; whether there was anything to measure."""
    if not isinstance(trajectories, list) or not isinstance(trainer_logps, list):
        return False
    paired = token_deltas(trajectories, trainer_logps)
    if paired is None or not bool(paired[1].any()):
        return False
    d, mask = paired
    # Imported here: reading a recording's mismatch (the CLI) needs no AReaL.
    from areal_debug import areal_compat

    areal_compat.record_token_stats(SCOPE, TOKENS, mask, **token_stats(d, mask))
    return True


# -- reading it back: a recording's steps, and a replay's --------------------------
# The columns a table shows: (statistic, reduce, heading). k1 and k2 only in
# --json: k3 is the unbiased estimate that is never negative, and the table fits
# 120 characters.
COLUMNS = (
    ("abs_diff", "avg", "mean|d|"),
    ("abs_diff", "max", "max|d|"),
    ("k3", "avg", "k3"),
    ("ratio", "min", "r min"),
    ("ratio", "max", "r max"),
    ("over_log2", "avg", ">log2"),
    ("over_log5", "avg", ">log5"),
)
# What the short headings mean, under the table.
LEGEND = (
    "d = trainer - engine log-prob per loss token; k3: KL(engine || trainer), "
    "estimate exp(d)-1-d; r: the importance ratio exp(d) before any clamp; >log2, "
    ">log5: share of tokens with |d| above; worst: group/sample of the token with the "
    "largest |d|. k1 and k2 with --json."
)


@dataclass
class StepMismatch:
    """One step's mismatch as recorded (and as a replay of it measured it)."""

    step: int
    tokens: float | None
    recorded: dict[str, float]  # "<name>/<reduce>" -> value
    replayed: dict[str, float] | None = None
    replayed_tokens: float | None = None
    # What the replayed figures measure: the engine's gap (the replay's trainer on
    # the recorded weights) up to where the replay left the recording; after it,
    # the drift of the replay's own weights from those that generated the batch.
    replayed_is: str | None = None
    # From the kept per-token log-probs (inspect/tokens.py TokenFigures): the
    # ratio's p50 and p99 and the row with the worst token; None: none kept.
    per_token: dict[str, Any] | None = None
    # AReaL's own ppo_actor/train_infer statistics of the recorded step beside
    # ours (stages/train_infer.py Pair); None where the step has none.
    areal: list | None = None


def of_stats(stats: dict[str, Any]) -> tuple[float | None, dict[str, float]]:
    """(loss tokens measured, "<name>/<reduce>" -> value) of one step's
    statistics; (None, {}) where the step has none (recompute_logprob off, or a
    recording made before areal-debug measured it)."""
    values = {}
    for name in NAMES:
        for reduce in ("avg", "min", "max"):
            key = stat_name(name, reduce)
            if key in stats:
                values[f"{name}/{reduce}"] = float(stats[key])
    tokens = stats.get(TOKENS_STAT)
    return (float(tokens) if tokens is not None else None), values


class ReplayReport(Protocol):
    """What this module reads of a replay report (compare/report.py's
    ReplayReport, a layer above: read through it, never as raw JSON)."""

    def series(self, which: str) -> dict[int, dict[str, float]]: ...

    def first_stage_divergence(self) -> dict[str, Any] | None: ...


def of_replay(report: ReplayReport) -> dict[int, tuple[float | None, dict]]:
    """The mismatch each step of a replay report measured, by step."""
    return {
        step: of_stats(values) for step, values in report.series("replayed").items()
    }


ENGINE_GAP = "the engine gap"
# Stages a step runs before its log-probs are recomputed: a replay that first
# differs at one of them computes that step's log-probs on other weights or data.
BEFORE_LOGP = ("model", "logp")


def replayed_meaning(report: ReplayReport, step: int) -> str:
    """What a replay's mismatch at ``step`` measures: the engine gap up to the step
    where the replay left the recording (that step too, where it left after the
    log-probs: advantages, loss, gradients, weights); after it, "policy drift
    since step K" (the replay's weights are no longer the ones that generated the
    rollouts); at it, where it left before them (another model, another
    forward), the gap of the replay's own model."""
    first = report.first_stage_divergence() or {}
    left = first.get("step")
    if left is None:
        return ENGINE_GAP
    if step > left:
        return f"policy drift since step {left}"
    if step == left and first.get("stage") in BEFORE_LOGP:
        return f"not the recording's model or forward (step {left}: {first['stage']})"
    return ENGINE_GAP


def table(
    reader, steps: Container[int] | None = None, replay: ReplayReport | None = None
) -> list[StepMismatch]:
    """Each complete step's mismatch (``steps``: only those), with a replay
    report's beside it, each replayed row saying what it measures."""
    replayed = of_replay(replay) if replay is not None else {}
    rows = []
    for step in reader.available_steps():
        if steps is not None and step not in steps:
            continue
        stats = reader.recorded_stats(step) or {}
        tokens, recorded = of_stats(stats)
        row = StepMismatch(
            step, tokens, recorded, areal=train_infer.pairs_of_stats(stats)
        )
        if step in replayed:
            row.replayed_tokens, row.replayed = replayed[step]
            row.replayed_is = replayed_meaning(replay, step)
        rows.append(row)
    return rows
