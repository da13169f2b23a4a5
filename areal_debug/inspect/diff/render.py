# SPDX-License-Identifier: Apache-2.0
"""Human-readable views of two runs set side by side (``areal-debug diff``: two
recordings, or a replay and its recording), as rich renderables.

Nothing here prints: :mod:`areal_debug.cli` hands these to a console.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from areal_debug.recording.reader import format_ranges
from areal_debug.stages.names import Verdict

if TYPE_CHECKING:  # the modules behind the slow commands import AReaL
    from areal_debug.compare.batches import BatchesDiff
    from areal_debug.inspect.diff.two_runs import RecordingDiff, RunDiff

from areal_debug.inspect.render import HEADLINE, _num

# Prompts listed under each heading of a recordings' diff (--json lists all).
PROMPT_ROWS = 5


def recording_diff(d: RecordingDiff) -> Group:
    parts: list[Any] = [Text(f"a: {d.a}\nb: {d.b}")]
    if d.steps_only_in_a or d.steps_only_in_b:
        parts.append(
            Text(
                f"steps only in a: {format_ranges(d.steps_only_in_a)}; only in b: "
                f"{format_ranges(d.steps_only_in_b)}"
            )
        )
    if d.batches is not None:
        parts.extend(_batches(d.batches))
    if d.first is None:
        parts.append(
            Text(
                f"identical batches at every common step "
                f"({format_ranges(d.identical_steps)})",
                style="green",
            )
        )
        return Group(*parts)
    f = d.first
    where = [f"step {f.step}"]
    if f.shard is not None:
        where.append(f"shard {f.shard}")
    if f.trajectory is not None:
        where.append(f"trajectory {f.trajectory}")
    if f.key:
        where.append(f"key {f.key!r}")
    if f.element is not None:
        where.append(f"element {tuple(f.element)}")
    parts.append(
        Text(
            "first payload difference: " + ", ".join(where) + f" ({f.what})",
            style="bold red",
        )
    )
    parts.append(Text(f"  a: {f.a!r}\n  b: {f.b!r}"))
    if d.identical_steps:
        parts.append(
            Text(f"identical before it: steps {format_ranges(d.identical_steps)}")
        )
    if d.stats_of_first:
        table = Table(
            title=f"Recorded statistics that differ at step {d.stats_of_first[0].step}"
        )
        for col in ("metric", "a", "b", "rel diff"):
            table.add_column(col, justify="left" if col == "metric" else "right")
        for r in d.stats_of_first[:25]:
            table.add_row(r.metric, _num(r.a), _num(r.b), _num(r.rel_diff, 3))
        parts.append(table)
    return Group(*parts)


# Steps listed one by one in the batches' table; the rest are counted.
BATCH_ROWS = 20


def _batches(b: BatchesDiff) -> list[Any]:
    """What two recordings' samples hold, step by step, and the run's prompts."""
    steps = [s.step for s in b.steps]
    if b.first_step is None:
        return [
            Text(
                f"same prompts in the same order, completions, rewards, versions and "
                f"start weights at every common step ({format_ranges(steps)})",
                style="green",
            )
        ]
    first = next(s for s in b.steps if s.step == b.first_step)
    where = ""
    if first.first_in_a or first.first_in_b:
        sides = [
            f"{side} group {g[0]} sample {g[1]}"
            for side, g in (("a", first.first_in_a), ("b", first.first_in_b))
            if g
        ]
        where = ", first at " + " / ".join(sides)
    out: list[Any] = [
        Text(
            f"the runs part at step {b.first_step}: {', '.join(first.differ)}{where}",
            style="bold red",
        )
    ]
    same = [s.step for s in b.steps if s.same]
    if same:
        out.append(Text(f"the same at steps {format_ranges(same)}"))
    table = Table(title="Steps whose batches differ (samples paired by prompt)")
    for col in ("step", "samples a/b", "prompts", "completions", "rewards"):
        table.add_column(col, justify="right" if col != "prompts" else "left")
    table.add_column("versions", justify="right")
    table.add_column("start weights")
    differing = [s for s in b.steps if s.differ]
    for s in differing[:BATCH_ROWS]:
        if s.prompts_only_in_a or s.prompts_only_in_b:
            prompts = (
                f"{s.prompts_only_in_a} only in a, {s.prompts_only_in_b} only in b"
            )
        else:
            prompts = "other order" if "prompt order" in s.differ else "same"
        table.add_row(
            str(s.step),
            f"{s.samples[0]}/{s.samples[1]}",
            prompts,
            *(str(n) for n in (s.completions_differ, s.rewards_differ)),
            str(s.versions_differ),
            s.weights.replace("_", " "),
        )
    out.append(table)
    if len(differing) > BATCH_ROWS:
        out.append(Text(f"... and {len(differing) - BATCH_ROWS} more steps differ"))
    c = b.counts
    out.append(
        Text(
            f"prompts over steps {format_ranges(steps)}: a consumed {c['prompts_a']} "
            f"distinct, b {c['prompts_b']}; {c['only_in_a']} only in a, {c['only_in_b']} only "
            f"in b; {c['more_in_a']} more often in a, {c['more_in_b']} more often in b"
        )
    )
    for title, listed in (
        ("only in a", b.only_in_a),
        ("only in b", b.only_in_b),
        ("more often in a", b.more_in_a),
        ("more often in b", b.more_in_b),
    ):
        for p in listed[:PROMPT_ROWS]:
            sides = [
                f"{n} sample(s) in {side}"
                + (f" (steps {format_ranges(steps)})" if n else "")
                for side, n, steps in (("a", p.a, p.steps_a), ("b", p.b, p.steps_b))
            ]
            out.append(Text(f"  {title}: prompt {p.prompt}: " + ", ".join(sides)))
        if len(listed) > PROMPT_ROWS:
            # The count above is every prompt: say the list is not (issue 69).
            out.append(
                Text(f"  ... and {len(listed) - PROMPT_ROWS} more {title} (--json)")
            )
    return out


def run_diff(d: RunDiff, all_metrics: bool, metrics: list[str] | None) -> Group:
    parts: list[Any] = [Text(f"a ({d.a_label}): {d.a}\nb ({d.b_label}): {d.b}")]
    if d.story:
        # The headline: where the replay left the recording, and why; the
        # metric table below is the detail.
        parts.append(Text(f"Replay story: {d.story}", style="bold"))
    if d.stages:
        parts.append(Text(f"Stages: {d.stages}", style="bold"))
    rows = d.rows
    if metrics:
        rows = [r for r in rows if r.metric in metrics]
    elif not all_metrics:
        # Headline metrics at every step, and whatever differs at the first
        # divergent step (--all shows everything).
        first = d.first_divergence
        rows = [
            r
            for r in rows
            if r.metric.endswith(HEADLINE)
            or (
                first is not None
                and r.step == first.step
                and r.status != Verdict.IDENTICAL
            )
        ]
    table = Table(title="Per-step statistics")
    for col in ("step", "metric", d.a_label, d.b_label, "rel diff", "status"):
        table.add_column(
            col, justify="left" if col in ("metric", "status") else "right"
        )
    for r in rows:
        style = "red" if r.status == Verdict.DIVERGED else None
        table.add_row(
            str(r.step),
            r.metric,
            _num(r.a, 10),
            _num(r.b, 10),
            _num(r.rel_diff, 3),
            r.status,
            style=style,
        )
    parts.append(table)
    f = d.first_divergence
    if f is None:
        parts.append(
            Text(
                f"No divergence: steps {format_ranges(d.steps)} identical in every metric.",
                style="green",
            )
        )
    else:
        parts.append(
            Text(
                f"First divergent step {f.step}; largest difference there: {f.metric}: "
                f"{d.a_label} {f.a!r}, {d.b_label} {f.b!r} (rel diff "
                f"{_num(f.rel_diff, 3)})",
                style="red",
            )
        )
    return Group(*parts)
