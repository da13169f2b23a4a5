# SPDX-License-Identifier: Apache-2.0
"""The second recording of a two-run page (``areal-debug report A B``).

Two recordings (two seeds, a run before and after a resume or a code change)
set side by side: b's statistics over a's in every chart, the two runs' batches
compared step by step as ``diff REC_A REC_B`` compares them
(``compare/batches.py``: the same prompts in the same order, completions,
rewards, versions, start weights), and, for each of a's trajectories on the
page, its pair in b (the sample of the same prompt and occurrence) with b's
tokens, so that the page aligns the two and marks the first that differs.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from areal_debug.compare.batches import compare_batches, pair_samples
from areal_debug.inspect.diff.two_runs import recording_series
from areal_debug.inspect.page.steps import (
    Decoder,
    StepLimits,
    finite_or_text,
    step_detail,
)
from areal_debug.recording.reader import RecordingReader


def other_run(
    ra: RecordingReader,
    rb: RecordingReader,
    chosen: list[int],
    details: dict[str, Any],
    limits: StepLimits,
    decoder: Decoder,
) -> dict[str, Any]:
    """What the page holds of b: ``details`` are a's steps as the page shows
    them (their kept rows are those paired)."""
    common = [s for s in chosen if rb.has_step(s)]
    batches = compare_batches(ra, rb, common)
    compared, b_details = {}, {}
    for result in batches.steps:
        step = result.step
        pairs, wanted = _pairs_of_rows(ra, rb, step, details[str(step)]["rows"])
        b_details[str(step)] = step_detail(rb, step, limits, decoder, only=wanted)
        compared[str(step)] = {**asdict(result), "pairs": pairs}
    on_page = set(chosen)
    series = recording_series(rb.path)
    m = rb.manifest
    return {
        "recording": os.path.abspath(rb.path),
        "label": f"b {m.experiment_name}/{m.trial_name}",
        "series": {
            str(s): finite_or_text(v) for s, v in series.items() if s in on_page
        },
        "steps": rb.available_steps(),
        "first_step": batches.first_step,
        "first_parts": batches.first_parts,
        "counts": batches.counts,
        "compared": compared,
        "details": b_details,
    }


def _pairs_of_rows(
    ra: RecordingReader, rb: RecordingReader, step: int, rows: list[dict[str, Any]]
) -> tuple[dict[str, Any], set[tuple[int, int]]]:
    """For each of a's rows on the page ("group,sample"), b's sample of the same
    prompt and occurrence and whether its completion, reward and versions are
    a's (None where b has none); and the (group, sample) of b to keep."""
    ca, cb = ra.step_contents(step), rb.step_contents(step)
    where_a, where_b = ca.where(), cb.where()
    index = {w: i for i, w in enumerate(where_a)}
    paired = dict(pair_samples(ca, cb))
    out, wanted = {}, set()
    for row in rows:
        key = (row["group"], row["row"])
        i = index.get(key)
        j = paired.get(i) if i is not None else None
        if j is None:
            out[f"{key[0]},{key[1]}"] = None
            continue
        wanted.add(where_b[j])
        out[f"{key[0]},{key[1]}"] = {
            "group": where_b[j][0],
            "sample": where_b[j][1],
            "completion": ca.completion[i] == cb.completion[j],
            "reward": ca.reward[i] == cb.reward[j],
            "versions": (ca.first_version[i], ca.last_version[i])
            == (cb.first_version[j], cb.last_version[j]),
        }
    return out, wanted
