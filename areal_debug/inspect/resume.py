# SPDX-License-Identifier: Apache-2.0
"""Was a resume lossless? The resumes inside one recording, checked.

A dump run that resumes (AReaL's ``recover.mode``) starts at the step after its
last recover checkpoint: it digests the weights it starts from (the ``model``
stage of that step, which only a run's first step has), and it moves the steps
the interrupted run had recorded from there on to ``superseded/<time>/`` before
recording them again. So one recording answers, for each resume at step K:

- whether the weights the resumed run started from are those the interrupted
  run had after step K-1 (its ``weights`` digests of step K-1), and its
  optimizer's step count the interrupted run's after step K-1;
- whether each redone step consumed the same prompts as the attempt it
  superseded, and in the same order (a batch collected as rollouts finish comes
  in their order: another order loses and repeats nothing);
- where a redone step consumed other prompts: those a kept step had already
  consumed earlier in the epoch (repeated), and the superseded attempt's that no
  kept step consumed (lost);
- whether the recover checkpoint it resumed from counted batches AReaL had
  drawn and not trained (its dispatcher draws the next batch ahead whenever a
  step's rollouts take over 1 s; docs/areal-known-issues.md): the dataloader
  position in the checkpoint of step K-1 kept with the recording, against the
  batches the epoch had trained. A resume skips those batches, unless the run
  kept them and served them first (``debug.lossless_resume``).

Prompts are compared by a digest of their token ids (the rows' tokens outside
the loss mask, ``recording/contents.py``), one per trajectory dict and step:
read from the steps' metadata where the dump run kept them there. Only what the
resume changed counts: a dataset may hold a prompt twice, and a redone step that
consumed what its superseded attempt did repeats nothing, whatever the dataset
holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from areal_debug import areal_compat
from areal_debug.recording.checkpoints import kept_position
from areal_debug.recording.reader import RecordingReader, superseded_attempts
from areal_debug.stages.names import (
    MODEL_STAGE,
    OPTIMIZER_STEPS_STAT,
    Verdict,
    split_mini_batch,
)

# A resume's dataloader verdicts beside Verdict's identical and not_compared.
DRAWN_AHEAD = "drawn_ahead"
KEPT = "kept"


@dataclass
class Resume:
    """One resume: where it started and what it found there."""

    step: int
    # The resumed run's starting weights against the interrupted run's after
    # step - 1: identical, differs or not_compared (with why).
    weights: str
    weights_detail: str = ""
    # Its optimizer's step count as it started against the interrupted run's
    # after step - 1 (that step's count at its start plus its updates): an
    # optimizer state not restored starts from 0.
    optimizer: str = Verdict.NOT_COMPARED
    optimizer_detail: str = ""
    # The interrupted attempt's steps (superseded/<time>/), if it had recorded any
    # from ``step`` on, and the redone steps whose prompts differ from them.
    superseded: str | None = None
    compared_steps: list[int] = field(default_factory=list)
    different_prompts: list[int] = field(default_factory=list)
    # Redone steps that consumed the same prompts in another order: nothing lost
    # or repeated (a batch collected as rollouts finish comes in their order).
    reordered: list[int] = field(default_factory=list)
    # The dataloader position in the recover checkpoint of step - 1 against the
    # batches its epoch had trained: DRAWN_AHEAD (batches skipped by the resume),
    # KEPT (drawn ahead, kept and served first), IDENTICAL (nothing drawn ahead)
    # or not_compared (with why).
    dataloader: str = Verdict.NOT_COMPARED
    dataloader_detail: str = ""
    # Batches drawn and not trained at that checkpoint; inputs served first.
    drawn_ahead: int = 0
    served_first: int = 0


@dataclass
class ResumeCheck:
    recording: str
    resumes: list[Resume]
    # Prompts a redone step consumed in place of its superseded attempt's that a
    # kept step had consumed earlier in the epoch: (step, prompt digest, the
    # earlier step).
    repeated: list[dict[str, Any]]
    # Prompts a superseded attempt consumed that no kept step did: (step of the
    # attempt, prompt digest).
    lost: list[dict[str, Any]]

    @property
    def lossless(self) -> bool:
        return not (
            self.repeated
            or self.lost
            or any(r.dataloader == DRAWN_AHEAD for r in self.resumes)
            or any(r.different_prompts for r in self.resumes)
            or any(r.weights == Verdict.DIFFERS for r in self.resumes)
            or any(r.optimizer == Verdict.DIFFERS for r in self.resumes)
        )

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "lossless": self.lossless}


def step_prompts(reader: RecordingReader, step: int) -> list[str]:
    """The step's prompts in batch order, one digest per trajectory dict (its
    first sample's: the step metadata's ``contents``, or its payload's)."""
    return reader.step_contents(step).group_prompts()


def _run_starts(reader: RecordingReader, attempts) -> dict[int, dict | None]:
    """Steps a run started at after step 0, each with the digests of the weights
    it started from: the steps that have them, and each superseded attempt's
    first step (None where it has none)."""
    found: dict[int, dict | None] = {}
    for step in reader.available_steps():
        start = (reader.stage_digests(step) or {}).get("global", {}).get(MODEL_STAGE)
        if step > 0 and start is not None:
            found[step] = start
    for step in _attempt_starts(attempts):
        found.setdefault(step, None)
    return dict(sorted(found.items()))


def _attempt_starts(attempts) -> set[int]:
    """The first step each superseded attempt recorded, whole or not."""
    starts = set()
    for _, attempt in attempts:
        steps = attempt.available_steps() or attempt.incomplete_steps()
        if steps:
            starts.add(min(steps))
    return starts


def _weights(reader: RecordingReader, step: int, start) -> tuple[str, str]:
    # Here, not at the top: `ls` and `inspect` read a resume's dataloader
    # position through this module and load no torch.
    from areal_debug.compare.stages import compare_model, weights_verdict

    if start is None:
        return Verdict.NOT_COMPARED, (
            f"step {step} keeps no digest of the weights it started from (recorded "
            "with debug.stage_digests=false, or not complete)"
        )
    return weights_verdict(
        compare_model(step, start, None, reader.stage_digests(step - 1))
    )


def _optimizer_steps(reader: RecordingReader, step: int) -> int | None:
    stats = reader.recorded_stats(step) if reader.has_step(step) else None
    value = (stats or {}).get(OPTIMIZER_STEPS_STAT)
    return int(value) if isinstance(value, int | float) else None


def _updates(reader: RecordingReader, step: int) -> int | None:
    """The optimizer steps ``step`` took: its mini-batches (one update each,
    its weights digested per mini-batch), else the count's difference from the
    step before."""
    weights = (reader.stage_digests(step) or {}).get("global", {}).get("weights", {})
    batches = {split_mini_batch(name)[0] for name in weights}
    if batches and None not in batches:
        return len(batches)
    now, before = _optimizer_steps(reader, step), _optimizer_steps(reader, step - 1)
    return now - before if now is not None and before is not None else None


def _optimizer(reader: RecordingReader, step: int) -> tuple[str, str]:
    now, before = _optimizer_steps(reader, step), _optimizer_steps(reader, step - 1)
    updates = _updates(reader, step - 1)
    if now is None or before is None or updates is None:
        return Verdict.NOT_COMPARED, (
            f"steps {step - 1} and {step} keep no optimizer step count (recorded "
            "by an earlier areal-debug, or without recomputed log-probs)"
        )
    expected = before + updates
    if now == expected:
        return Verdict.IDENTICAL, (
            f"{now} optimizer steps, as the interrupted run had after step {step - 1}"
        )
    return Verdict.DIFFERS, (
        f"the resumed run's optimizer had taken {now} steps, the interrupted run's "
        f"{expected} after step {step - 1}: its state was not restored"
    )


def check_resumes(reader: RecordingReader) -> ResumeCheck:
    attempts = superseded_attempts(reader)
    resumes, lost, repeated = [], [], []
    # Every kept step's prompts, read only where an attempt has steps to set them
    # against (a recording without one reads no batch).
    kept: dict[int, list[str]] = {}
    if any(attempt.available_steps() for _, attempt in attempts):
        kept = {s: step_prompts(reader, s) for s in reader.available_steps()}
    everywhere = {p for prompts in kept.values() for p in prompts}
    spe = max(1, int(reader.steps_per_epoch or 1))
    # Batches earlier resumes skipped, by epoch: the position counts them.
    skipped: dict[int, int] = {}
    for step, start in _run_starts(reader, attempts).items():
        weights, detail = _weights(reader, step, start)
        resume = Resume(step, weights, detail, *_optimizer(reader, step))
        _position(reader, resume, skipped)
        for name, attempt in attempts:
            redone = [s for s in attempt.available_steps() if s >= step]
            if not redone or min(redone) != step:
                continue
            resume.superseded = name
            for s in redone:
                before = step_prompts(attempt, s)
                # A batch drawn ahead by step - 1 was the superseded attempt's
                # step `step` (its first batch drawn after the checkpoint's).
                ahead = resume.dataloader == DRAWN_AHEAD and (
                    s < step + resume.drawn_ahead
                )
                lost += [
                    {
                        "step": s,
                        "prompt": p,
                        "drawn_ahead_by": step - 1 if ahead else None,
                    }
                    for p in before
                    if p not in everywhere
                ]
                if s not in kept:
                    continue
                resume.compared_steps.append(s)
                if before == kept[s]:
                    continue
                if sorted(before) == sorted(kept[s]):
                    resume.reordered.append(s)
                    continue
                resume.different_prompts.append(s)
                for p in set(kept[s]) - set(before):
                    earlier = _consumed_before(kept, p, s, spe)
                    if earlier is not None:
                        repeated.append({"step": s, "prompt": p, "earlier": earlier})
        resumes.append(resume)
    return ResumeCheck(reader.path, resumes, repeated, lost)


def resume_positions(reader: RecordingReader) -> list[Resume]:
    """Each resume whose interrupted attempt recorded steps, with its dataloader
    verdict only (no prompt, weight or statistic read): what ``ls``,
    ``inspect`` and the page say of a recording's resumes."""
    skipped: dict[int, int] = {}
    found = []
    for step in sorted(_attempt_starts(superseded_attempts(reader))):
        resume = Resume(step, Verdict.NOT_COMPARED)
        _position(reader, resume, skipped)
        found.append(resume)
    return found


def describe_position(resume: Resume) -> str:
    """One line: the resume's step and its dataloader verdict."""
    head = {
        DRAWN_AHEAD: f"{resume.drawn_ahead} batch(es) drawn ahead and SKIPPED",
        KEPT: f"{resume.drawn_ahead} batch(es) drawn ahead, kept and served first",
        Verdict.IDENTICAL: "nothing drawn ahead",
    }.get(str(resume.dataloader), "dataloader position not compared")
    return f"resumed at step {resume.step}: {head}"


def _position(reader: RecordingReader, resume: Resume, skipped: dict) -> None:
    """Set ``resume``'s dataloader verdict from the recover checkpoint it resumed
    from, as kept with the recording."""
    before = resume.step - 1
    found = kept_position(reader.path, before)
    if found is None:
        resume.dataloader_detail = (
            f"no recover checkpoint of step {before} is kept with the recording "
            "(recorded by an earlier areal-debug, or removed by the retention "
            "policy): its dataloader position is not known"
        )
        return
    info, states = found
    drawn = [areal_compat.batches_drawn(s) for s in states]
    epoch, epoch_step = info.get("epoch"), info.get("epoch_step")
    if None in drawn or not isinstance(epoch_step, int):
        resume.dataloader_detail = (
            f"the recover checkpoint of step {before} holds no dataloader position "
            "this areal-debug reads"
        )
        return
    trained = epoch_step + 1
    position = max(drawn)
    if trained == info.get("steps_per_epoch") and position < trained:
        # The epoch was trained whole and the next one drawn from.
        ahead = position
    else:
        ahead = position - trained - skipped.get(epoch, 0)
    resume.drawn_ahead = max(0, ahead)
    resume.served_first = max(
        len(s.get(areal_compat.UNTRAINED_KEY) or ()) for s in states
    )
    where = (
        f"the recover checkpoint of step {before} counts {position} batch(es) "
        f"drawn in epoch {epoch}, {trained} trained"
    )
    if resume.drawn_ahead == 0:
        resume.dataloader = Verdict.IDENTICAL
        resume.dataloader_detail = f"{where}: nothing drawn ahead"
    elif resume.served_first:
        resume.dataloader = KEPT
        resume.dataloader_detail = (
            f"{where}: {resume.drawn_ahead} drawn ahead, and the "
            f"{resume.served_first} input(s) drawn and not trained were kept and "
            "served first (debug.lossless_resume)"
        )
    else:
        resume.dataloader = DRAWN_AHEAD
        resume.dataloader_detail = (
            f"{where}: {resume.drawn_ahead} batch(es) AReaL drew ahead before step "
            f"{before}'s recover checkpoint, which the resume skipped (rerun with "
            "debug.lossless_resume=true)"
        )
        skipped[epoch] = skipped.get(epoch, 0) + resume.drawn_ahead


def _consumed_before(kept: dict[int, list[str]], p: str, step: int, spe: int):
    """The first kept step of ``step``'s epoch before it that consumed ``p``."""
    for s in range(step - step % spe, step):
        if p in kept.get(s, ()):
            return s
    return None
