# SPDX-License-Identifier: Apache-2.0
"""Human-readable views of the inspection results, as rich renderables.

Nothing here prints: :mod:`areal_debug.cli` hands these to a console.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from areal_debug.inspect.common import human_bytes, python_command
from areal_debug.recording.reader import format_ranges

if TYPE_CHECKING:  # the modules behind the slow commands import AReaL
    from areal_debug.inspect.listing import RecordingSummary
    from areal_debug.inspect.plots.two_runs import PlotResult
    from areal_debug.inspect.preflight.doctor import DoctorReport
    from areal_debug.inspect.reproducer.extract import ExtractResult
    from areal_debug.inspect.show import StepView
    from areal_debug.inspect.tokens import WorstTokens
    from areal_debug.stages.mismatch import StepMismatch

TRUNCATE = 160
HEADLINE = (
    "grad_norm",
    "actor_loss/avg",
    "task_reward/avg",
    "importance_weight/avg",
)  # characters of a text shown without --full


def _num(v: Any, digits: int = 6) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def _short(v: Any) -> str:
    """Three significant digits, small values as 7.14e-4: a column of 8."""
    if isinstance(v, float) and math.isfinite(v) and v != 0 and abs(v) < 0.01:
        return f"{v:.2e}".replace("e-0", "e-")
    return _num(v, 3)


def _cut(text: str | None, full: bool) -> str:
    if text is None:
        return ""
    text = text.replace("\n", "⏎")
    if full or len(text) <= TRUNCATE:
        return text
    return text[:TRUNCATE] + f"… (+{len(text) - TRUNCATE} chars, --full shows all)"


def listing(summaries: list[RecordingSummary]) -> Group:
    if not summaries:
        return Group(Text("No recordings found (no manifest.json under the path)."))
    table = Table(title="Recordings", show_lines=True)
    for col in ("run", "mode", "steps", "pinned", "ckpts", "size", "fmt", "replays"):
        table.add_column(col, overflow="fold")
    # Paths go below the table, one a line and never folded (a folded path breaks
    # mid-word and cannot be copied); each row names its path's number.
    paths = Text()
    for number, s in enumerate(summaries, 1):
        paths.append(f"[{number}] ", style="dim")
        paths.append(f"{s.path}\n")
    for number, s in enumerate(summaries, 1):
        if s.error:
            table.add_row(
                f"[{number}]", "?", "", "", "", human_bytes(s.size_bytes), "?", s.error
            )
            continue
        steps = format_ranges(s.steps)
        if s.incomplete:
            steps += f"\nincomplete: {format_ranges(s.incomplete)}"
        for stop in s.stopped:
            steps += f"\nstopped at {stop.get('step')} (shard {stop.get('shard')})"
        if s.resumes:
            steps += f"\nresumed {s.resumes}x: areal-debug resume checks it"
        if s.drawn_ahead:
            steps += (
                f"\n[bold red]resumed at {format_ranges(s.drawn_ahead)}: skipped "
                "the batch AReaL drew ahead[/bold red]"
            )
        for line in s.not_covered:
            steps += f"\n[yellow]{escape(line)}[/yellow]"
        replays = "\n".join(f"{r.trial}: {r.verdict}" for r in s.replays) or "none"
        table.add_row(
            f"{s.experiment}/{s.trial}\n[dim]\\[{number}][/dim]",
            s.mode,
            steps,
            format_ranges(s.pinned) if s.pinned else "-",
            format_ranges(s.checkpoints) if s.checkpoints else "-",
            human_bytes(s.size_bytes),
            f"v{s.format_version}",
            replays,
        )
    paths.no_wrap = True
    paths.overflow = "ignore"
    paths.rstrip()
    return Group(table, paths)


def show(view: StepView, full: bool) -> Group:
    head = Text(
        f"step {view.step} of {view.recording}: {view.num_trajectories} trajectories "
        f"in {view.num_shards} shard(s), {view.num_tokens} tokens, policy versions "
        f"{view.policy_version[0]}-{view.policy_version[1]}"
        if view.policy_version
        else f"step {view.step} of {view.recording}: {view.num_trajectories} "
        f"trajectories in {view.num_shards} shard(s), {view.num_tokens} tokens"
    )
    parts: list[Any] = [head]
    if view.tokenizer:
        parts.append(
            Text(f"decoded with the tokenizer at {view.tokenizer}", style="dim")
        )
    groups = Table(title="Trajectories (one per prompt; rows = samples)")
    for col in (
        "group",
        "shard",
        "samples",
        "prompt tok",
        "completion tok",
        "rewards",
        "reward mean ± std",
        "versions",
        "staleness",
    ):
        groups.add_column(col, justify="right" if col != "rewards" else "left")
    for t in view.trajectories:
        versions = [s.versions for s in t.sequences if s.versions]
        stale = [s.staleness for s in t.sequences if s.staleness]
        groups.add_row(
            str(t.index),
            f"{t.shard}:{t.index_in_shard}",
            str(len(t.sequences)),
            _minmax([s.prompt_tokens for s in t.sequences]),
            _minmax([s.completion_tokens for s in t.sequences]),
            " ".join(_num(s.reward, 3) for s in t.sequences),
            f"{_num(t.reward_mean, 3)} ± {_num(t.reward_std, 3)}",
            _minmax([v for r in versions for v in r]) if versions else "-",
            _minmax([v for r in stale for v in r]) if stale else "-",
        )
    parts.append(groups)
    other = [(t.index, k, v) for t in view.trajectories for k, v in t.other.items()]
    if other:
        table = Table(title="Other keys (recorded and replayed as they are)")
        for col in ("group", "key", "dtype, shape: values"):
            table.add_column(col, justify="right" if col == "group" else "left")
        for index, key, text in other:
            table.add_row(str(index), key, text)
        parts.append(table)
    if view.tokenizer:
        for t in view.trajectories:
            texts = Table(
                title=f"Group {t.index} (trajectory dict {t.index} of the step)",
                show_lines=True,
                expand=True,
            )
            texts.add_column("sample", justify="right", width=6)
            texts.add_column("reward", justify="right", width=7)
            texts.add_column("prompt", ratio=1, overflow="fold")
            texts.add_column("completion", ratio=1, overflow="fold")
            for s in t.sequences:
                texts.add_row(
                    str(s.row),
                    _num(s.reward, 3),
                    _cut(s.prompt_text, full),
                    _cut(s.completion_text, full),
                )
            parts.append(texts)
    if view.stats is not None:
        picked = {
            k: v
            for k, v in view.stats.items()
            if k.endswith(
                (
                    "grad_norm",
                    "actor_loss/avg",
                    "task_reward/avg",
                    "importance_weight/avg",
                )
            )
        }
        if picked:
            parts.append(
                Text(
                    "recorded: "
                    + ", ".join(f"{k} {_num(v)}" for k, v in picked.items())
                )
            )
    return Group(*parts)


def _minmax(values: list[int]) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def plot_result(r: PlotResult) -> Text:
    verdict = (
        f"first divergence at step {r.first_divergence[0]} ({r.first_divergence[1]})"
        if r.first_divergence
        else "no divergence"
    )
    return Text(
        f"wrote {r.path}: {len(r.metrics)} metrics over steps {format_ranges(r.steps)}, "
        f"{r.a_label} vs {r.b_label}; {verdict}"
    )


def extract_result(r: ExtractResult) -> Text:
    lines = [
        f"extracted step {r.source_step} of {r.source}",
        f"  into {r.out} ({human_bytes(r.size_bytes)})",
        f"  recording   {r.recording} (steps {format_ranges(r.steps_written)}"
        + (
            f", recover checkpoint of step {r.checkpoint}"
            if r.checkpoint is not None
            else ""
        )
        + ")",
        f"  trajectories {'all' if r.trajectories is None else format_ranges(r.trajectories)}",
        f"  test        {r.test_file}",
        f"  faithful    {'yes' if r.faithful else 'NO'}",
        "",
        r.asserts,
    ]
    lines += [f"NOTE: {n}" for n in r.notes]
    lines += ["", f"run it:  {python_command()} -m pytest -q {shlex.quote(r.out)}"]
    return Text("\n".join(lines))


_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def doctor_report(r: DoctorReport) -> Group:
    parts: list[Any] = [
        Text(
            f"{r.kind} of {r.recording}, steps {r.start_step}-"
            f"{'end' if r.end_step is None else r.end_step}"
        )
    ]
    table = Table(show_lines=True, expand=True)
    table.add_column("severity", width=8)
    table.add_column("what", ratio=3, overflow="fold")
    table.add_column("why it matters", ratio=3, overflow="fold")
    table.add_column("what to do", ratio=2, overflow="fold")
    for f in r.findings:
        table.add_row(
            Text(f.severity, style=_SEVERITY_STYLE[f.severity]), f.what, f.why, f.fix
        )
    parts.append(table)
    counts = {
        s: sum(f.severity == s for f in r.findings)
        for s in ("error", "warning", "info")
    }
    parts.append(
        Text(
            f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)",
            style="bold red" if counts["error"] else "green",
        )
    )
    return Group(*parts)


def mismatch(recording: str, rows: list[StepMismatch]) -> Group:
    """One row per step (and per replayed step, beside it); a note where no step
    has the mismatch."""
    from areal_debug.stages.mismatch import COLUMNS, ENGINE_GAP, LEGEND

    replay = any(r.replayed is not None for r in rows)
    # No vertical rules: up to 15 columns fit 120 characters.
    table = Table(
        title=f"training-inference mismatch of {recording}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("step", justify="right")
    if replay:
        table.add_column("run")
    table.add_column("tokens", justify="right")
    for _, _, heading in COLUMNS:
        table.add_column(heading, justify="right")
    # Only from the kept per-token log-probs: the ratio's percentiles, the worst row.
    per_token = any(r.per_token for r in rows)
    if per_token:
        for heading in ("r p50", "r p99", "worst"):
            table.add_column(heading, justify="right")

    def cells(tokens, values, figures=None) -> list[str]:
        row = [_num(int(tokens)) if tokens is not None else "-"]
        # Three significant digits: the table fits 120 columns (--json has all).
        row += [_short(values.get(f"{n}/{r}")) for n, r, _ in COLUMNS]
        if not per_token:
            return row
        if not figures:
            return row + ["-"] * 3
        where = f"{figures['worst_group']}/{figures['worst_row']}"
        return row + [
            _short(figures["ratio_p50"]),
            _short(figures["ratio_p99"]),
            where,
        ]

    for r in rows:
        recorded = cells(r.tokens, r.recorded, r.per_token)
        if replay:
            table.add_row(str(r.step), "recorded", *recorded)
            if r.replayed is not None:
                # Never mixed silently: after the replay left the recording its
                # figures are its own weights' drift, not the engine's gap.
                drift = r.replayed_is is not None and r.replayed_is != ENGINE_GAP
                label = f"replayed: {r.replayed_is}" if drift else "replayed"
                table.add_row(
                    "",
                    label,
                    *cells(r.replayed_tokens, r.replayed),
                    style="yellow" if drift else None,
                )
        else:
            table.add_row(str(r.step), *recorded)
    parts: list[Any] = [table, Text(LEGEND, style="dim")]
    worst = [r for r in rows if r.per_token]
    if worst:
        w = max(worst, key=lambda r: r.per_token["worst_abs_diff"])
        parts.append(
            page_hint(
                w.per_token["worst_link"],
                f"the worst row (step {w.step})",
                "each step's worst_link",
            )
        )
    from areal_debug.stages.train_infer import summary

    areal_line = summary({r.step: r.areal for r in rows if r.areal})
    if areal_line:
        parts.append(Text(areal_line))
    if not any(r.recorded or r.replayed for r in rows):
        parts.append(
            Text(
                "No step has the mismatch: the run did not recompute log-probs "
                "(actor.recompute_logprob=false), or it was recorded before "
                "areal-debug measured it. A replay with recompute on measures it."
            )
        )
    return Group(*parts)


def worst_tokens(recording: str, worst: WorstTokens) -> Group:
    """The worst tokens, worst first; the notes of steps that kept none."""
    table = Table(
        title=f"loss tokens furthest from the engine's log-probs: {recording}"
    )
    # One numbering with the page: group (the trajectory dict) and sample (its row).
    for heading in ("step", "group", "sample", "pos", "engine", "trainer", "d"):
        table.add_column(heading, justify="right")
    table.add_column(Text("tokens before it, [[the token]]"), overflow="fold")
    for t in worst.tokens:
        table.add_row(
            str(t.step),
            str(t.group),
            str(t.row),
            str(t.position),
            _num(t.engine, 4),
            _num(t.trainer, 4),
            _num(t.delta, 4),
            Text(t.context),
        )
    parts: list[Any] = [table] if worst.tokens else []
    if worst.tokens:
        parts.append(page_hint(worst.tokens[0].link, "the first", "each its link"))
    parts += [Text(note) for note in worst.notes]
    return Group(*parts)


def page_hint(link: str, opens: str, json_gives: str, inputs: str = "REC") -> Text:
    """One dim line under a command's view: the report page's ``link`` (built
    from ``inputs``) opens ``opens``; ``--json`` gives ``json_gives``."""
    return Text(
        f"In the page (areal-debug report {inputs} -o page.html), page.html{link} "
        f"opens {opens}; --json gives {json_gives}.",
        style="dim",
    )


def resume_check(check) -> Group:
    """Each resume, then the recording's repeated and lost prompts, then the
    verdict."""
    parts: list[Any] = []
    if not check.resumes:
        parts.append(
            Text(f"{check.recording}: no resume (every step was recorded by one run).")
        )
    for r in check.resumes:
        weights = {
            "identical": "the weights it started from are the interrupted run's "
            "after step {before} ({detail})",
            "differs": "the weights it started from are NOT the interrupted run's "
            "after step {before}: {detail}",
        }.get(str(r.weights), "its starting weights not compared: {detail}")
        lines = [
            f"Resumed at step {r.step}: "
            + weights.format(before=r.step - 1, detail=r.weights_detail),
            "  Optimizer: "
            + {"identical": "the same step count: ", "differs": "NOT restored: "}.get(
                str(r.optimizer), "not compared: "
            )
            + r.optimizer_detail,
        ]
        lines.append(
            "  Dataloader: "
            + {
                "drawn_ahead": "DRAWN AHEAD and skipped: ",
                "kept": "drawn ahead, kept and served first: ",
                "identical": "at the batches trained: ",
            }.get(str(r.dataloader), "position not compared: ")
            + r.dataloader_detail
        )
        if r.superseded is None:
            lines.append(
                "  The interrupted run had recorded no step from there on: no "
                "redone step to compare."
            )
        elif r.different_prompts:
            lines.append(
                f"  Redone steps on OTHER prompts than the attempt they superseded "
                f"(superseded/{r.superseded}): {format_ranges(r.different_prompts)}"
            )
        else:
            order = (
                f" (steps {format_ranges(r.reordered)} in another order: a batch "
                "comes in the order its rollouts finish)"
                if r.reordered
                else ", in the same order,"
            )
            lines.append(
                f"  Redone steps {format_ranges(r.compared_steps) or '-'} consumed the "
                f"same prompts{order} as the attempt they superseded "
                f"(superseded/{r.superseded})."
            )
        parts += [Text(line) for line in lines]
    for rep in check.repeated[:10]:
        parts.append(
            Text(
                f"Prompt {rep['prompt']} consumed again by the redone step "
                f"{rep['step']}: step {rep['earlier']} of the same epoch had it."
            )
        )
    if len(check.repeated) > 10:
        parts.append(Text(f"... {len(check.repeated) - 10} more repeated (--json)."))
    for lost in check.lost[:10]:
        why = (
            "lost with the interrupted attempt"
            if lost.get("drawn_ahead_by") is None
            else f"drawn ahead by step {lost['drawn_ahead_by']} before its recover "
            "checkpoint, and skipped by the resume"
        )
        parts.append(
            Text(
                f"Prompt {lost['prompt']} of the superseded step {lost['step']} was "
                f"consumed by no kept step: {why}."
            )
        )
    if len(check.lost) > 10:
        parts.append(Text(f"... {len(check.lost) - 10} more lost (--json)."))
    parts.append(
        Text(
            (
                "Lossless: nothing lost or repeated, every resume on the interrupted "
                "run's weights."
                if check.resumes
                else "No resume in this recording: nothing to check (each step was "
                "recorded once, by one run)."
            )
            if check.lossless
            else "NOT lossless (above).",
            style="green" if check.lossless else "bold red",
        )
    )
    return Group(*parts)
