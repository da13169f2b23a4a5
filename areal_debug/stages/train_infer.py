# SPDX-License-Identifier: Apache-2.0
"""AReaL's own training–inference statistics, set beside ours.

AReaL main after 2.1.0 (#1736, areal/trainer/ppo/stats.py
``log_train_inference_stats``) measures the same gap in
``PPOActor._compute_advantages``, before PPO overwrites the rollout log-probs,
under ``ppo_actor/train_infer/``: with d = trainer - rollout log-prob per
next-token-aligned loss token, in float64, ``logp_abs_diff/{avg,min,max}``,
``kl_k1`` -d, ``kl_k2`` d^2/2, ``kl_k3`` exp(d)-1-d, ``ratio_outside_<c>`` (|d| >
log c, NaN where a log-prob is not finite), ``nonfinite_logp_fraction`` and
``n_valid_tokens``. Ours (stages/mismatch.py) are measured on the same
recomputed log-probs in float32, so the two agree to float noise, or one of
them counts other tokens or other log-probs: said per step.

Read from a step's committed statistics only: no AReaL import, no build check
(a step carries them or it does not).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

SCOPE = "ppo_actor/train_infer"
# Ours (stages/mismatch.py SCOPE): "<OURS>/<name>/<reduce>" and "<OURS>/n_tokens".
OURS = "areal_debug/mismatch"
# The ratio's tails AReaL reports (ratio_outside_<c>); ours use the same
# (stages/mismatch.py over_log<c>, which imports them from here).
TAILS = ("1.5", "2", "3", "5", "10")
# Our token count's name (stages/mismatch.py TOKENS; this module is imported by
# that one, so it cannot import it back).
TOKENS = "n_tokens"
# (ours: "<name>/<reduce>" as mismatch.of_stats gives them, or the token count;
#  AReaL's key under SCOPE)
PAIRS = (
    (TOKENS, "n_valid_tokens"),
    ("abs_diff/avg", "logp_abs_diff/avg"),
    ("abs_diff/max", "logp_abs_diff/max"),
    ("k1/avg", "kl_k1"),
    ("k2/avg", "kl_k2"),
    ("k3/avg", "kl_k3"),
    *((f"over_log{c}/avg", f"ratio_outside_{c}") for c in TAILS),
    ("nonfinite/avg", "nonfinite_logp_fraction"),
)
# Float noise between our float32 and AReaL's float64 of the same log-probs: the
# token sums of a step round at about 1e-7 relative per token in float32.
RTOL, ATOL = 1e-4, 1e-7


@dataclass(frozen=True)
class Pair:
    """One of our statistics and AReaL's of the same quantity, at one step."""

    ours: str
    areal: str
    ours_value: float
    areal_value: float
    agrees: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def of_stats(stats: dict[str, Any]) -> dict[str, float]:
    """AReaL's own training–inference statistics of a step, by key under SCOPE
    ({} where the step has none: AReaL before #1736, or recompute off)."""
    prefix = SCOPE + "/"
    return {
        k[len(prefix) :]: float(v)
        for k, v in stats.items()
        if k.startswith(prefix) and isinstance(v, (int, float))
    }


def pairs_of_stats(stats: dict[str, Any]) -> list[Pair] | None:
    """AReaL's statistics of one step's committed statistics set beside ours;
    None where the step has none of AReaL's."""
    theirs = of_stats(stats)
    if not theirs:
        return None
    prefix = OURS + "/"
    ours = {
        k[len(prefix) :]: float(v)
        for k, v in stats.items()
        if k.startswith(prefix) and isinstance(v, (int, float))
    }
    tokens = ours.pop(TOKENS, None)
    return beside_ours(tokens, ours, theirs)


def summary_of_stats(series: dict[int, dict[str, Any]]) -> str | None:
    """``summary`` of steps' committed statistics ({step: statistics})."""
    return summary({step: pairs_of_stats(stats) for step, stats in series.items()})


def beside_ours(
    tokens: float | None, ours: dict[str, float], theirs: dict[str, float]
) -> list[Pair]:
    """Each statistic both sides have, with whether they agree: to float noise;
    a tail share to one token either way (a |d| at log c can round across it
    between float32 and float64); a NaN of AReaL's (a non-finite log-prob in its
    tails) agrees with nothing, and our ``nonfinite`` says how many."""
    values = dict(ours)
    if tokens is not None:
        values[TOKENS] = tokens
    n = max(tokens or 0.0, 1.0)
    pairs = []
    for mine, key in PAIRS:
        if mine not in values or key not in theirs:
            continue
        a, b = values[mine], theirs[key]
        slack = 1.0 / n if mine.startswith("over_log") else 0.0
        agrees = math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL + slack)
        pairs.append(Pair(mine, key, a, b, agrees))
    return pairs


def summary(by_step: dict[int, list[Pair]]) -> str | None:
    """One line on AReaL's statistics beside ours over steps ({step: its pairs}),
    None where no step has AReaL's."""
    with_areal = {step: pairs for step, pairs in by_step.items() if pairs}
    if not with_areal:
        return None
    apart = [(s, p) for s, pairs in with_areal.items() for p in pairs if not p.agrees]
    if not apart:
        steps = len(with_areal)
        return (
            f"AReaL's own {SCOPE} statistics agree with ours at {steps} step(s) "
            f"(to float noise: ours float32, AReaL's float64)."
        )
    step, p = apart[0]
    more = f" ({len(apart) - 1} more pair(s) apart, --json)" if len(apart) > 1 else ""
    return (
        f"AReaL's own {SCOPE} statistics differ from ours beyond float noise at "
        f"step {step}: {p.areal} {p.areal_value:.6g} vs ours {p.ours} "
        f"{p.ours_value:.6g}{more}. They measure the same log-probs: another mask "
        "(token count), a non-finite log-prob, or another recompute."
    )
