# SPDX-License-Identifier: Apache-2.0
"""Anomaly triggers: which committed statistics make the recorder pin a step.

Checked on the coordinator after each step commits its statistics. A trigger
fires on a NaN or inf loss or grad norm, on a loss or grad norm above a multiple
of its running median, or on a user threshold such as
``ppo_actor/task_reward/avg < 0.05``. The step and the steps before it are then
pinned (never deleted by retention), and why is written with the step.
"""

from __future__ import annotations

import math
import operator
import re
import statistics
from collections import deque
from dataclasses import dataclass

_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_THRESHOLD = re.compile(r"^\s*(\S+)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
# Enough history for a median that means something.
MIN_HISTORY = 5
WINDOW = 50


@dataclass(frozen=True)
class Threshold:
    metric: str
    op: str
    value: float

    def fires(self, stats: dict[str, float]) -> bool:
        v = stats.get(self.metric)
        return v is not None and _OPS[self.op](v, self.value)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


def parse_threshold(text: str) -> Threshold:
    """'ppo_actor/task_reward/avg < 0.05' -> Threshold."""
    m = _THRESHOLD.match(text)
    try:
        if m is None:
            raise ValueError
        return Threshold(m.group(1), m.group(2), float(m.group(3)))
    except ValueError:
        raise ValueError(
            f"debug.anomaly_thresholds entry {text!r} is not 'METRIC OP NUMBER' "
            f"with OP one of {sorted(_OPS)}, e.g. 'ppo_actor/task_reward/avg < 0.05'."
        ) from None


# The training-inference mismatch's mean |d| (stages/mismatch.py names it; the
# store imports nothing of the stages): a jump in the gap precedes collapses.
MISMATCH_WATCHED = "areal_debug/mismatch/abs_diff/avg"


def watched(key: str) -> bool:
    """Losses, grad norms and the training-inference mismatch: the statistics a
    training failure shows first."""
    name = key.rsplit("/", 1)[-1]
    return (
        "grad_norm" in key
        or ("loss" in key and name in ("avg", "loss", key))
        or key == MISMATCH_WATCHED
    )


class AnomalyDetector:
    """Remembers recent values; ``check`` returns why a step is anomalous."""

    def __init__(self, median_factor: float | None, thresholds: list[str]):
        self.median_factor = median_factor
        self.thresholds = [parse_threshold(t) for t in thresholds]
        self._history: dict[str, deque] = {}

    def check(self, stats: dict[str, float]) -> list[str]:
        reasons = []
        for key in sorted(k for k in stats if watched(k)):
            value = stats[key]
            if not isinstance(value, int | float):
                continue
            if not math.isfinite(value):
                reasons.append(f"{key} is {value}")
                continue
            past = self._history.setdefault(key, deque(maxlen=WINDOW))
            # Magnitudes: a loss may be negative; its size is what blows up.
            if self.median_factor is not None and len(past) >= MIN_HISTORY:
                median = statistics.median(past)
                if median > 0 and abs(value) > self.median_factor * median:
                    reasons.append(
                        f"{key} = {value:.6g} is above {self.median_factor:g} x its "
                        f"running median {median:.6g} (last {len(past)} steps)"
                    )
            past.append(abs(value))
        for t in self.thresholds:
            if t.fires(stats):
                reasons.append(f"{t} (it is {stats[t.metric]:.6g})")
        return reasons
