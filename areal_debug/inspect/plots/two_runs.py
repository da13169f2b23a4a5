# SPDX-License-Identifier: Apache-2.0
"""``areal-debug plot``: per-step statistics of two runs in one readable PNG.

One recording alone is drawn by :mod:`areal_debug.inspect.plots.one_run`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from areal_debug.inspect.common import InspectError
from areal_debug.inspect.diff.two_runs import Source, diff_runs, open_source, pair

# Shown by default, in this order, when the runs have them: what people look at
# first when a step goes wrong. (metric, panel title, y-axis label with unit)
DEFAULT_METRICS = (
    (
        "ppo_actor/update/actor_loss/avg",
        "Actor loss (mean over micro-batches)",
        "loss (per token)",
    ),
    ("ppo_actor/update/grad_norm", "Gradient norm (before clipping)", "L2 norm"),
    ("ppo_actor/task_reward/avg", "Task reward (mean over sequences)", "reward"),
    (
        "ppo_actor/update/importance_weight/avg",
        "Importance weight π/π_old (mean)",
        "ratio",
    ),
    ("ppo_actor/update/clip_ratio/avg", "PPO clip ratio (clipped tokens)", "fraction"),
    ("ppo_actor/update/entropy/avg", "Policy entropy (mean over tokens)", "nats"),
)
# Drawn too when one recording is plotted alone (a replay of the same batch never
# changes it).
SEQUENCE_LENGTH = (
    "ppo_actor/seq_len/avg",
    "Sequence length (prompt + completion, mean)",
    "tokens",
)


@dataclass
class PlotResult:
    path: str
    metrics: list[str]
    steps: list[int]
    a_label: str
    b_label: str
    # (step, metric) of the first divergence, None when every step matches.
    first_divergence: tuple[int, str] | None


# The training-inference mismatch (stages/mismatch.py), where the run measured it.
MISMATCH = (
    "areal_debug/mismatch/abs_diff/avg",
    "Training-inference mismatch (mean |trainer - engine log-prob|, loss tokens)",
    "nats",
)


def title_and_unit(metric: str) -> tuple[str, str]:
    for name, title, unit in (*DEFAULT_METRICS, SEQUENCE_LENGTH, MISMATCH):
        if name == metric:
            return title, unit
    return metric, "value"


def choose_metrics(a: Source, b: Source, wanted: list[str] | None) -> list[str]:
    """The metrics to draw: ``wanted`` (checked), else the defaults both runs have."""
    have = set().union(*a.series.values()) & set().union(*b.series.values())
    if wanted:
        missing = [m for m in wanted if m not in have]
        if missing:
            sample = ", ".join(sorted(have)[:8])
            raise InspectError(
                f"Metric(s) {missing} are not in both runs' statistics (they have "
                f"e.g. {sample}; `areal-debug diff` lists them all)."
            )
        return list(wanted)
    chosen = [m for m, _, _ in DEFAULT_METRICS if m in have]
    if not chosen:
        raise InspectError(
            "Neither run has the usual PPO statistics (loss, grad norm, reward); name "
            "the ones to plot with --metric."
        )
    return chosen


def new_grid(n: int, legend_row: bool = False):
    """A figure of ``n`` panels, two a row (one alone); room for a legend below."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    return plt.subplots(
        rows,
        cols,
        figsize=(6.4 * cols, 3.4 * rows + 0.9 + (0.4 if legend_row else 0.0)),
        squeeze=False,
    )


def save_figure(fig, out: str, bottom: float = 0.0) -> None:
    """Lay ``fig`` out under its title (above a legend ``bottom`` high), write it
    to ``out`` as PNG and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot(
    a_path: str,
    b_path: str | None,
    out: str,
    metrics: list[str] | None = None,
    title: str | None = None,
) -> PlotResult:
    """Draw ``a`` vs ``b`` (or a replay report vs its recording) into ``out`` (PNG).
    One recording alone is its recorded run: :mod:`one_run`."""
    a, b = pair(open_source(a_path), open_source(b_path) if b_path else None)
    if a.kind == "report" and b.kind == "recording":
        a, b = b, a
    comparison = diff_runs(a, b)
    names = choose_metrics(a, b, metrics)
    first = comparison.first_divergence
    fig, axes = new_grid(len(names))
    steps = comparison.steps
    for ax, name in zip(axes.flat, names):
        _panel(ax, name, a, b, steps, first)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    verdict = (
        comparison.story
        if comparison.story and first is not None
        else f"first divergence: step {first.step}, {first.metric}"
        if first is not None
        else f"identical at every compared step ({len(steps)})"
    )
    fig.suptitle(
        (title or f"{a.label} vs {b.label}") + f"\n{verdict}",
        fontsize=12,
    )
    save_figure(fig, out)
    return PlotResult(
        os.path.abspath(out),
        names,
        steps,
        a.label,
        b.label,
        (first.step, first.metric) if first is not None else None,
    )


def _panel(ax, name: str, a: Source, b: Source, steps: list[int], first) -> None:
    title, unit = title_and_unit(name)
    xa = [s for s in steps if name in a.series[s]]
    xb = [s for s in steps if name in b.series[s]]
    ax.plot(
        xa,
        [a.series[s][name] for s in xa],
        "o-",
        color="#1f77b4",
        lw=2.2,
        ms=7,
        label=a.label,
    )
    # Dashed and smaller on top: where both agree, both stay visible.
    ax.plot(
        xb,
        [b.series[s][name] for s in xb],
        "x--",
        color="#ff7f0e",
        lw=1.6,
        ms=8,
        label=b.label,
    )
    diverged = [
        s
        for s in steps
        if name in a.series[s]
        and name in b.series[s]
        and a.series[s][name] != b.series[s][name]
        and not (math.isnan(a.series[s][name]) and math.isnan(b.series[s][name]))
    ]
    if diverged:
        ax.axvline(
            diverged[0],
            color="#d62728",
            ls=":",
            lw=1.5,
            label=f"diverges from step {diverged[0]}",
        )
    if first is not None and first.step in steps:
        ax.axvspan(first.step - 0.5, first.step + 0.5, color="#d62728", alpha=0.08)
    ax.set_title(name if title == name else f"{title}\n{name}", fontsize=9)
    ax.set_xlabel("global step")
    ax.set_ylabel(unit)
    ax.set_xticks(steps if len(steps) <= 20 else ax.get_xticks())
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
