# SPDX-License-Identifier: Apache-2.0
"""``areal-debug report``: one self-contained HTML page of a recorded run or replay.

Everything the page shows is gathered here into one JSON-able dict (per-step
statistics, anomaly pins, incomplete steps, each step's trajectories, the replay
report's first divergence and stage report, the manifest) and written into the
page template (``template/``) with its script and style inline: no network
fetch, so the file opens from disk, from a bug-report attachment, or on an
air-gapped cluster. The charts are SVG drawn by the page's own script.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from areal_debug.compare.coverage import coverage
from areal_debug.compare.report import ReplayReport
from areal_debug.inspect.common import (
    InspectError,
    is_recording,
    logger,
    parse_steps,
    replay_report_at,
    require_path,
    track,
)
from areal_debug.inspect.diff.two_runs import recording_series
from areal_debug.inspect.listing import pinned_steps
from areal_debug.inspect.page.steps import (
    Decoder,
    StepLimits,
    finite_or_text,
    step_detail,
)
from areal_debug.inspect.page.two_runs import other_run
from areal_debug.inspect.plots.one_run import RECORDING_METRICS, anomalies
from areal_debug.inspect.plots.two_runs import MISMATCH
from areal_debug.inspect.resume import describe_position, resume_positions
from areal_debug.inspect.show import load_tokenizer, tokenizer_path_of
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.stages.names import Verdict, step_order
from areal_debug.version import areal_debug_version

# Trajectories kept per step, and completion tokens per trajectory for the token
# view: a 100-step recording of 512 x 2k-token steps stays a page a browser opens.
DEFAULT_MAX_PER_STEP = 32
DEFAULT_MAX_TOKENS = 1024
# Lengths drawn besides the plot's panels when the run committed them.
LENGTH_METRICS = (
    ("ppo_actor/prompt_len/avg", "Prompt length (mean)", "tokens"),
    ("ppo_actor/response_len/avg", "Completion length (mean)", "tokens"),
)
# The page's first chart: the training-inference gap, which the page's coloured
# tokens show per token (the plot's panels follow).
PAGE_FIRST = (MISMATCH,)
PAGE_FILES = ("page.html", "page.css", "page.js")


@dataclass
class ReportResult:
    path: str
    bytes: int
    recording: str
    steps: list[int]
    trajectories: int
    trajectories_left_out: int
    replay: str | None = None
    # A second recording set beside the first, and the first step they part at.
    other: str | None = None
    parted_at: int | None = None
    # (step, metric) of the replay's first divergence.
    first_divergence: tuple[int, str] | None = None
    tokenizer: str | None = None
    notes: list[str] = field(default_factory=list)


def build_report(
    recording: str,
    replay: str | None,
    out: str,
    *,
    steps: str | None = None,
    max_per_step: int = DEFAULT_MAX_PER_STEP,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    tokenizer: str | None = None,
) -> ReportResult:
    """Write the page of the recording at ``recording`` (and of the replay report
    ``replay``, a file or a replay's log directory, or of a second recording set
    beside it) to ``out``."""
    require_path(recording, "The recording")
    if not is_recording(recording):
        raise InspectError(
            f"{recording} is not a recording (no manifest.json). Give the directory "
            "a dump run wrote (areal-debug ls ROOT lists them); a replay report "
            "goes second: areal-debug report REC REPORT -o page.html."
        )
    reader = RecordingReader(recording)
    chosen = _chosen_steps(reader, steps)
    other = RecordingReader(replay) if replay and is_recording(replay) else None
    replay = None if other is not None else replay
    blame_dir = None
    if replay is not None:
        blame_dir = os.path.dirname(replay) if os.path.isfile(replay) else replay
        if _blame_only(replay):
            replay = None  # a dump run's log folder: its sample parts, no replay
    notes: list[str] = []
    # Every shown step's statistics, read once: the charts and the AReaL note.
    on_page = set(chosen)
    series = {s: v for s, v in recording_series(reader.path).items() if s in on_page}
    data = _run_data(reader, chosen, series, every=steps is None)
    report = _replay_data(replay, reader, chosen, notes) if replay else None
    data["replay"] = report
    decoder, tok_path = _decoder(reader, tokenizer, notes)
    _areal_mismatch_note(series, notes)
    _packing_note(reader, notes)
    _resume_notes(reader, notes)
    for seam in reader.manifest.missing_seams:
        notes.append(
            f"Not recorded: {seam.get('capability', '?')} ({seam.get('problem', '?')} "
            "in the dump run's AReaL)."
        )
    notes.extend(f"Coverage: {line}." for line in coverage(reader, chosen).lines())
    limits = StepLimits(max_per_step, max_tokens)
    details = _step_details(reader, chosen, limits, decoder, report, blame_dir)
    data["other"] = (
        other_run(reader, other, chosen, details, limits, decoder) if other else None
    )
    data.update(
        details=details,
        vocab={str(k): v for k, v in decoder.pieces.items()},
        limits={"max_per_step": max_per_step, "max_tokens": max_tokens},
        tokenizer={"path": tok_path, "loaded": decoder.tokenizer is not None},
        notes=notes,
    )
    size = write_page(out, data)
    shown = sum(len(d["rows"]) for d in details.values())
    left_out = sum(d["left_out"] for d in details.values())
    first = (report or {}).get("first_divergence")
    return ReportResult(
        path=os.path.abspath(out),
        bytes=size,
        recording=os.path.abspath(recording),
        steps=chosen,
        trajectories=shown,
        trajectories_left_out=left_out,
        replay=(report or {}).get("path"),
        first_divergence=(first["global_step"], first["metric"]) if first else None,
        other=data["other"]["recording"] if other else None,
        parted_at=data["other"]["first_step"] if other else None,
        tokenizer=tok_path if decoder.tokenizer is not None else None,
        notes=notes,
    )


def _chosen_steps(reader: RecordingReader, steps: str | None) -> list[int]:
    complete = reader.available_steps()
    if not complete:
        raise InspectError(
            f"The recording {reader.path} holds no complete step (incomplete: "
            f"{format_ranges(reader.incomplete_steps())}): nothing to show. Let a "
            "dump run finish at least one step."
        )
    wanted = parse_steps(steps)
    if wanted is None:
        return complete
    chosen = [s for s in complete if s in wanted]
    if not chosen:
        raise InspectError(
            f"--steps {steps} names no complete step of {reader.path} (complete "
            f"steps: {format_ranges(complete)}). Choose among those."
        )
    return chosen


# -- the run: statistics, pins, manifest -------------------------------------------
def _run_data(
    reader: RecordingReader,
    chosen: list[int],
    series: dict[int, dict[str, float]],
    every: bool,
) -> dict[str, Any]:
    """Statistics (``series``: those of the steps shown), pins and gaps of the
    steps shown (``every``: the whole run, also incomplete steps after the last
    complete one)."""
    wanted = set(chosen)
    lo, hi = (-math.inf, math.inf) if every else (min(chosen), max(chosen))
    have = set().union(*series.values()) if series else set()
    metrics = [
        {"name": name, "title": title, "unit": unit}
        # (dict.fromkeys: in that order, each once)
        for name, title, unit in dict.fromkeys(
            (*PAGE_FIRST, *RECORDING_METRICS, *LENGTH_METRICS)
        )
        if name in have
    ]
    m = reader.manifest
    return {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "tool": f"areal-debug {areal_debug_version() or '?'}",
        "recording": os.path.abspath(reader.path),
        "label": f"{m.experiment_name}/{m.trial_name}",
        "manifest": _manifest(reader),
        "steps": chosen,
        "metrics": metrics,
        "series": {str(s): finite_or_text(v) for s, v in series.items()},
        "without_stats": [s for s in chosen if s not in series],
        "incomplete": [s for s in reader.incomplete_steps() if lo <= s <= hi],
        "anomalies": [
            {"step": a.step, "reasons": a.reasons}
            for a in anomalies(reader)
            if lo <= a.step <= hi
        ],
        "pinned": [s for s in pinned_steps(reader) if s in wanted],
    }


def _manifest(reader: RecordingReader) -> dict[str, Any]:
    m = reader.manifest
    return {
        "experiment": m.experiment_name,
        "trial": m.trial_name,
        "created": m.created,
        "format_version": m.format_version,
        "versions": {
            "areal-debug": m.areal_debug_version,
            "AReaL": m.areal_version,
            "torch": m.torch_version,
            "python": m.python_version,
        },
        "layout": m.layout.to_json(),
        "determinism": _jsonable(m.determinism),
        "config": _jsonable(m.config),
    }


# -- the replay: recorded vs replayed, first divergence, stage report ----------------
def _resume_notes(reader: RecordingReader, notes: list[str]) -> None:
    """A line per resume whose dataloader position is known: a batch AReaL drew
    ahead and the resume skipped is lost training data."""
    for resume in resume_positions(reader):
        if resume.dataloader != Verdict.NOT_COMPARED:
            notes.append(
                f"This run {describe_position(resume)}: {resume.dataloader_detail}."
            )


def _packing_note(reader: RecordingReader, notes: list[str]) -> None:
    """Where the recorded run packed sequences for an attention that cannot tell
    them apart (doctor's finding): the gap the page colours is the trainer's own
    making, so the page says so beside it."""
    from areal_debug.inspect.preflight.silent_configs import packed_attention

    for f in packed_attention(reader, reader.manifest.config):
        notes.append(
            f"Packing: the recorded run trained with {f.what}. {f.why}. "
            f"To check: {f.fix}."
        )


def _areal_mismatch_note(series: dict[int, dict[str, float]], notes: list[str]):
    """Where the steps carry AReaL's own ppo_actor/train_infer statistics: whether
    they agree with ours (the line `areal-debug mismatch` prints)."""
    from areal_debug.stages import train_infer

    line = train_infer.summary_of_stats(series)
    if line:
        notes.append(line)


def _replay_data(
    path: str, reader: RecordingReader, chosen: list[int], notes: list[str]
) -> dict[str, Any]:
    found, report = replay_report_at(path)
    if os.path.realpath(report.recording) != os.path.realpath(reader.path):
        note = (
            f"The replay report {found} is of the recording {report.recording}, not "
            f"of {reader.path}: its recorded values are compared as it wrote them."
        )
        notes.append(note)
        logger.warning(note)
    replayed = report.series("replayed")
    first = report.first_divergence()
    stage = report.first_stage_divergence()
    return {
        "path": os.path.abspath(found),
        "label": f"replay {os.path.basename(os.path.dirname(os.path.abspath(found)))}",
        "series": {
            str(s): finite_or_text(v) for s, v in replayed.items() if s in chosen
        },
        "steps": sorted(replayed),
        "status": {str(e.global_step): e.status for e in report.steps},
        "tolerance": {"rtol": report.rtol, "atol": report.atol},
        "topology": report.topology.describe() if report.topology.changed else None,
        "first_divergence": _jsonable(first),
        "first_stage": _jsonable(stage),
        "stage_report": _stage_report(report, stage, first),
        # The replay's story: what was changed, and its headline.
        "headline": report.headline(),
        # None for a report written before replays kept them.
        "config_changes": _jsonable(report.config_changes),
        "mismatch_meaning": _mismatch_meaning(report, replayed),
    }


def _mismatch_meaning(report: ReplayReport, replayed) -> dict[str, str]:
    """By step, what a replay's mismatch measures where it is not the engine's
    gap (stages/mismatch.py replayed_meaning): the mismatch chart bands those
    steps, as `mismatch REC RUN` labels their rows."""
    from areal_debug.stages.mismatch import ENGINE_GAP, replayed_meaning

    meanings = {str(s): replayed_meaning(report, s) for s in sorted(replayed)}
    return {s: m for s, m in meanings.items() if m != ENGINE_GAP}


def _stage_report(report: ReplayReport, stage, first) -> dict[str, Any] | None:
    """The first divergent step's stages, in the order the step reaches them."""
    if stage is None and first is None:
        return None
    step = stage["step"] if stage else first["global_step"]
    entry = next(e for e in report.steps if e.global_step == step)
    from areal_debug.compare.stages import describe

    return {
        "step": entry.global_step,
        "line": describe(entry.global_step, entry.stages) if entry.stages else None,
        "stages": [
            {"stage": name, **_jsonable(entry.stages[name])}
            for name in step_order(entry.stages)
        ],
    }


def _jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as text (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


# -- the steps' trajectories -------------------------------------------------------
def _decoder(
    reader: RecordingReader, tokenizer: str | None, notes: list[str]
) -> tuple[Decoder, str | None]:
    """The run's tokenizer (or ``tokenizer``); without one, token ids and a note."""
    path = tokenizer or tokenizer_path_of(reader)
    try:
        return Decoder(load_tokenizer(path)), path
    except InspectError as e:
        # The first sentence says why; show's advice (--decode) is not ours.
        why = " ".join(str(e).split()).split(". ")[0]
        note = (
            f"Texts are shown as token ids: {why}. Build the page with --tokenizer "
            "PATH (a directory with the tokenizer files, or a Hugging Face name) to "
            "decode them."
        )
        notes.append(note)
        logger.warning(note)
        return Decoder(), path


def _step_details(
    reader, chosen, limits, decoder, report, blame_dir: str | None
) -> dict[str, Any]:
    stage = (report or {}).get("first_stage")
    out = {}
    for step in track(chosen, "reading steps", total=len(chosen)):
        here = stage if stage and stage.get("step") == step else None
        parts = _blame_parts(blame_dir, reader, step)
        out[str(step)] = step_detail(reader, step, limits, decoder, here, blame=parts)
    return out


def _blame_only(path: str) -> bool:
    """A run's log folder with sample parts (debug.blame_steps) and no replay
    report: a dump run's."""
    from areal_debug.recording.format import BLAME_DIRNAME, REPLAY_REPORT_NAME

    return os.path.isdir(os.path.join(path, BLAME_DIRNAME)) and not os.path.exists(
        os.path.join(path, REPLAY_REPORT_NAME)
    )


def _blame_parts(blame_dir: str | None, reader, step: int) -> dict[str, Any] | None:
    """The step's sample parts where the run computed them (debug.blame_steps);
    None where there are none. ``step_detail`` places them in the recording."""
    from areal_debug.stages import sample_parts

    if blame_dir is None or not os.path.exists(
        sample_parts.blame_path(blame_dir, step)
    ):
        return None
    return sample_parts.read_parts(blame_dir, step)


# -- the page ------------------------------------------------------------------------
def write_page(out: str, data: dict[str, Any]) -> int:
    """The page with ``data`` and its script and style inline; its size in bytes."""
    html, css, js = (
        resources.files("areal_debug.inspect.page")
        .joinpath("template", name)
        .read_text(encoding="utf-8")
        for name in PAGE_FILES
    )
    # No "<" at all inside the <script> element that carries the data: "</script"
    # would end it and "<!--" change how the browser reads it. JSON strings take
    # the escape; "<" occurs nowhere else in JSON.
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("<", "\\u003c")
    page = (
        html.replace("/*STYLE*/", css)
        .replace("/*SCRIPT*/", js)
        .replace("{{TITLE}}", _escape(f"areal-debug report: {data['label']}"))
        .replace("/*DATA*/", payload)
    )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, out)
    return os.path.getsize(out)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def summary(r: ReportResult) -> str:
    """What the page holds, in words (the command's output)."""
    lines = [
        f"wrote {r.path} ({r.bytes / 2**20:.1f} MiB): steps {format_ranges(r.steps)} "
        f"of {r.recording}",
        f"  trajectories  {r.trajectories} shown"
        + (
            f", {r.trajectories_left_out} left out (--max-per-step)"
            if r.trajectories_left_out
            else ""
        ),
        f"  texts         {'decoded with ' + r.tokenizer if r.tokenizer else 'token ids'}",
    ]
    if r.replay:
        verdict = (
            f"first divergence at step {r.first_divergence[0]} "
            f"({r.first_divergence[1]})"
            if r.first_divergence
            else "identical at every replayed step"
        )
        lines.append(f"  replay        {r.replay}: {verdict}")
    if r.other:
        parted = (
            f"the runs part at step {r.parted_at}"
            if r.parted_at is not None
            else "the same batches at every common step"
        )
        lines.append(f"  beside        {r.other}: {parted}")
    lines += [f"  note          {n}" for n in r.notes]
    return "\n".join(lines)
