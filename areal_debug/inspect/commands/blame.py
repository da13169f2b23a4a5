# SPDX-License-Identifier: Apache-2.0
"""``areal-debug blame``: which samples drove a step's update, from the parts a
run with ``debug.blame_steps`` computed (``stages/blame.py``), ranked by share, in
the recording's numbering (group, sample); where the step is not finite, the
sample and the place a non-finite value entered first."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "which samples drove a step's update: each sample's share of the step's loss "
    "and of its gradient, from a run with debug.blame_steps; where the step's loss "
    "or gradient is not finite, the sample it came from and where it entered"
)
EXAMPLES = """examples:
  bash run_replay.sh debug.blame_steps=7 debug.replay_trial_name=blame
  areal-debug blame LOGS/blame --step 7              the step's top samples
  areal-debug blame LOGS/blame --step 7 --json       every sample, as JSON

RUN is the log folder of a run with debug.blame_steps (a replay's trial folder,
beside its replay_report.json, or a dump run's): it holds blame/step-N.json. Each
sample's part is computed by AReaL's own train_batch, once per sample with the
other samples' loss tokens masked out, before the mini-batch trains (the step
itself stays bit for bit). loss_share: the sample's absolute loss contribution
over the step's sum of them; grad_share: its gradient projected on its
mini-batch's gradient, over the step's squared gradient norms (signed: negative
pulls against the update; the shares add up to 1). Where the step is not finite,
origin names the first sample whose own part is not finite and where it entered:
reward, advantage, engine log-prob, trainer log-prob, loss or gradient (a NaN
reward makes its whole group's advantages NaN; the origin is the sample whose
reward is NaN)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir",
        metavar="RUN",
        help="the log folder of a run with debug.blame_steps (holds blame/)",
    )
    p.add_argument("--step", type=int, required=True, help="the step to look at")
    p.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="K",
        help="the K samples with the largest |grad_share| (default 10; all with --json)",
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.common import require_path

    with logs_to_stderr():
        from areal_debug.inspect.tokens import page_link
        from areal_debug.recording.reader import RecordingReader
        from areal_debug.stages import sample_parts

        run_dir = require_path(args.run_dir, "The run's log folder")
        if os.path.isfile(run_dir):  # its replay_report.json
            run_dir = os.path.dirname(run_dir)
        parts = sample_parts.read_parts(run_dir, args.step)
        samples = parts["samples"]
        reader = RecordingReader(require_path(parts["recording"], "The recording"))
        batch = reader.load_batch(args.step)
        unpaired = sample_parts.attach_recorded(samples, batch)
        samples = sample_parts.ranked(samples)
        for s in samples:
            # Its trajectory in the report page (the one numbering).
            if "group" in s and "sample" in s:
                s["link"] = page_link(args.step, s["group"], s["sample"])
        finite = sample_parts.step_is_finite(parts)
        data = {
            "step": args.step,
            "recording": parts["recording"],
            "finite": finite,
            "origin": None if finite else sample_parts.origin(samples),
            "loss_share_sum": sum(_num(s.get("loss_share")) for s in samples),
            "grad_share_sum": sum(_num(s.get("grad_share")) for s in samples),
            "mini_batches": parts["mini_batches"],
            "seconds": parts["seconds"],
            "unpaired": unpaired,
            "samples": samples,
        }
        decode = _decoder(reader)
        origin = data["origin"]
        if origin is not None:
            if origin.get("group") is not None:
                origin["link"] = page_link(args.step, origin["group"], origin["sample"])
            data["origin_text"] = _text(decode, batch, origin)
        top = samples[: max(args.top, 0)]
        if args.json:
            texts = {}
        else:
            texts = {id(s): _text(decode, batch, s) for s in top}
    if args.json:
        emit(args, data)
    else:
        emit(args, data, _view(data, top, texts))
    return 0


def _num(value: Any) -> float:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def _decoder(reader):
    """The run's tokenizer's decode (loaded once), None where it does not load."""
    from areal_debug.inspect.commands.mismatch import _decoder_of
    from areal_debug.inspect.show import tokenizer_path_of

    return _decoder_of(tokenizer_path_of(reader))


def _text(decode, batch: list, place: dict[str, Any]) -> str | None:
    """The sample's tokens, decoded where the run's tokenizer loads (else ids)."""
    from areal_debug.stages.layers import sample_tokens

    g, r = place.get("group"), place.get("sample")
    if g is None or r is None:
        return None
    tokens = sample_tokens(batch[g])[r].tolist()
    return decode(tokens) if decode is not None else " ".join(map(str, tokens))


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return "" if value is None else str(value)


def _view(data: dict[str, Any], top: list[dict], texts: dict[int, str | None]):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from areal_debug.inspect.render import page_hint

    head = Text(
        f"Step {data['step']}: {len(data['samples'])} samples; loss shares add up "
        f"to {_fmt(data['loss_share_sum'], 4)}, grad shares to "
        f"{_fmt(data['grad_share_sum'], 4)} ({data['seconds']:.1f} s of blame passes)."
    )
    parts: list = [head]
    origin = data["origin"]
    if origin is not None:
        parts.append(
            Text(
                f"Not finite: it entered at group {origin['group']} sample "
                f"{origin['sample']}'s {origin['entered']}: "
                f"{data.get('origin_text') or ''}",
                style="bold red",
            )
        )
    table = Table(title=f"the {len(top)} samples with the largest |grad_share|")
    for column in (
        "group/sample",
        "grad_share",
        "loss_share",
        "loss",
        "|grad|",
        "advantage",
        "reward",
        "clipped",
        "gap",
        "text",
    ):
        table.add_column(column, overflow="fold")
    for s in top:
        table.add_row(
            f"{s.get('group', '?')}/{s.get('sample', '?')}",
            _fmt(s.get("grad_share")),
            _fmt(s.get("loss_share")),
            _fmt(s.get("loss")),
            _fmt(s.get("grad_norm")),
            _fmt(s.get("advantage")),
            _fmt(s.get("reward")),
            _fmt(s.get("clipped")),
            _fmt(s.get("gap")),
            (texts.get(id(s)) or "")[:60],
        )
    parts.append(table)
    first = origin if origin is not None else (top[0] if top else None)
    if first is not None and first.get("link"):
        which = "the origin" if origin is not None else "the top sample"
        parts.append(page_hint(first["link"], which, "each sample its link", "REC RUN"))
    if data["unpaired"]:
        parts.append(
            Text(
                f"{len(data['unpaired'])} sample(s) match no row of the recording's "
                f"step {data['step']}: is {data['recording']} the run's recording?",
                style="yellow",
            )
        )
    return Group(*parts)
