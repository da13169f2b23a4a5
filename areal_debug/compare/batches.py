# SPDX-License-Identifier: Apache-2.0
"""Two recordings' batches compared by what each sample holds.

Two runs (a run before and after a resume, before and after a code change, two
seeds, two topologies) are set side by side step by step: did they consume the
same prompts in the same order, then the same completions, rewards and policy
versions, and did the step start from the same weights; over the whole run,
which prompts one consumed and the other did not, or consumed more often.

Everything is read from the steps' metadata (each sample digested at dump time,
``recording/contents.py``) and stage logs, not from the payloads, so two
recordings of a thousand steps compare in seconds. Samples are paired by
prompt, in order of appearance (the first sample of prompt P in a with the
first of P in b), so a batch in another order still compares sample by sample.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from areal_debug.compare.stages import compare_weights, start_weights, weights_verdict
from areal_debug.recording.contents import BatchContents
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.names import Verdict


class Part(str, Enum):
    """What two steps' batches can differ in, in the order it is asked."""

    WEIGHTS = "weights"  # the weights the step started from
    PROMPTS = "prompts"  # prompts one consumed and the other did not
    ORDER = "prompt order"  # the same prompts in another order
    COMPLETIONS = "completions"
    REWARDS = "rewards"
    VERSIONS = "versions"  # the policy versions that generated the tokens


# At most this many prompts are listed by name in a run's totals (all counted).
LISTED = 20


@dataclass
class StepBatches:
    """One step of both recordings, compared."""

    step: int
    samples: list[int]  # [a, b]
    # Parts in which the two differ, in ``Part`` order; empty: the same.
    differ: list[str]
    prompts_only_in_a: int = 0  # samples whose prompt b's step lacks
    prompts_only_in_b: int = 0
    completions_differ: int = 0  # of the samples paired by prompt
    rewards_differ: int = 0
    versions_differ: int = 0
    # identical, differs or not_compared (a side keeps no digest of them).
    weights: str = Verdict.NOT_COMPARED
    weights_detail: str = ""
    # The first of a's samples that differs from its pair, or that b lacks:
    # [group, sample] in a's batch, and in b's where it has a pair.
    first_in_a: list[int] | None = None
    first_in_b: list[int] | None = None

    @property
    def same(self) -> bool:
        return not self.differ


@dataclass
class PromptCount:
    """A prompt consumed a different number of times by the two runs."""

    prompt: str
    a: int  # samples of it a consumed
    b: int
    steps_a: list[int]
    steps_b: list[int]


@dataclass
class BatchesDiff:
    steps: list[StepBatches]
    # The first step where the two part, and in what (``Part`` values).
    first_step: int | None
    first_parts: list[str]
    # Over every common step: prompts only one run consumed, and prompts both
    # consumed but one more often (repeated); each with its steps. Counted in
    # samples (a group of n samples of one prompt counts n).
    only_in_a: list[PromptCount] = field(default_factory=list)
    only_in_b: list[PromptCount] = field(default_factory=list)
    more_in_a: list[PromptCount] = field(default_factory=list)
    more_in_b: list[PromptCount] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def compare_batches(
    ra: RecordingReader, rb: RecordingReader, steps: list[int]
) -> BatchesDiff:
    """``steps`` (common to both) compared, and the prompts over all of them."""
    results, seen_a, seen_b = [], defaultdict(list), defaultdict(list)
    stages = (_StageLogs(ra), _StageLogs(rb))
    for step in steps:
        ca, cb = ra.step_contents(step), rb.step_contents(step)
        for seen, contents in ((seen_a, ca), (seen_b, cb)):
            for prompt in contents.prompt:
                seen[prompt].append(step)
        result = compare_step(step, ca, cb)
        result.weights, result.weights_detail = _weights(*stages, step)
        if result.weights == Verdict.DIFFERS:
            result.differ.insert(0, Part.WEIGHTS.value)
        results.append(result)
    first = next((r for r in results if r.differ), None)
    out = BatchesDiff(
        results,
        first.step if first else None,
        list(first.differ) if first else [],
    )
    _prompt_totals(out, seen_a, seen_b)
    return out


def compare_step(step: int, a: BatchContents, b: BatchContents) -> StepBatches:
    """Two batches of one step, sample by sample (paired by prompt)."""
    result = StepBatches(step, [a.num_samples, b.num_samples], [])
    only_a = Counter(a.prompt) - Counter(b.prompt)
    only_b = Counter(b.prompt) - Counter(a.prompt)
    result.prompts_only_in_a = sum(only_a.values())
    result.prompts_only_in_b = sum(only_b.values())
    pairs = pair_samples(a, b)
    first = None
    for i, j in pairs:
        differs = False
        if j is None:
            differs = True
        else:
            for column, counter in (
                ("completion", "completions_differ"),
                ("reward", "rewards_differ"),
            ):
                if getattr(a, column)[i] != getattr(b, column)[j]:
                    setattr(result, counter, getattr(result, counter) + 1)
                    differs = True
            if (a.first_version[i], a.last_version[i]) != (
                b.first_version[j],
                b.last_version[j],
            ):
                result.versions_differ += 1
                differs = True
        if differs and first is None:
            first = (i, j)
    if result.prompts_only_in_a or result.prompts_only_in_b:
        result.differ.append(Part.PROMPTS.value)
    elif a.prompt != b.prompt:
        result.differ.append(Part.ORDER.value)
    for part, count in (
        (Part.COMPLETIONS, result.completions_differ),
        (Part.REWARDS, result.rewards_differ),
        (Part.VERSIONS, result.versions_differ),
    ):
        if count:
            result.differ.append(part.value)
    if first is None and result.prompts_only_in_b:
        # Every sample of a has its pair: the first of b's that has none.
        paired = {j for _, j in pairs}
        first = (None, next(j for j in range(b.num_samples) if j not in paired))
    if first is not None:
        i, j = first
        result.first_in_a = list(a.where()[i]) if i is not None else None
        result.first_in_b = list(b.where()[j]) if j is not None else None
    return result


def pair_samples(a: BatchContents, b: BatchContents) -> list[tuple[int, int | None]]:
    """Each of a's samples with b's sample of the same prompt and occurrence
    (None where b has no such one), in a's order."""
    in_b: dict[str, list[int]] = defaultdict(list)
    for j, prompt in enumerate(b.prompt):
        in_b[prompt].append(j)
    taken: Counter = Counter()
    out = []
    for i, prompt in enumerate(a.prompt):
        k = taken[prompt]
        taken[prompt] += 1
        found = in_b.get(prompt, ())
        out.append((i, found[k] if k < len(found) else None))
    return out


class _StageLogs:
    """A recording's stage digests by step, each file read once (a step's start
    weights are in its own log or the step before's)."""

    def __init__(self, reader: RecordingReader):
        self.reader, self.read = reader, {}

    def __call__(self, step: int) -> dict[str, Any] | None:
        if step not in self.read:
            self.read[step] = self.reader.stage_digests(step) if step >= 0 else None
            self.read.pop(step - 2, None)  # walked in order: older ones are done
        return self.read[step]

    def start(self, step: int) -> dict[str, list] | None:
        return start_weights(step, self(step), self(step - 1))[0]


def _weights(a: _StageLogs, b: _StageLogs, step: int) -> tuple[str, str]:
    sides = [a.start(step), b.start(step)]
    if any(side is None for side in sides):
        missing = " and ".join(n for n, s in zip("ab", sides) if s is None)
        return Verdict.NOT_COMPARED, (
            f"{missing} keeps no digest of the weights step {step} started from"
        )
    return weights_verdict(compare_weights(*sides))


def _prompt_totals(
    out: BatchesDiff, seen_a: dict[str, list[int]], seen_b: dict[str, list[int]]
) -> None:
    def count(prompt: str) -> PromptCount:
        sa, sb = seen_a.get(prompt, []), seen_b.get(prompt, [])
        return PromptCount(prompt, len(sa), len(sb), sorted(set(sa)), sorted(set(sb)))

    only_a = [p for p in seen_a if p not in seen_b]
    only_b = [p for p in seen_b if p not in seen_a]
    both = [p for p in seen_a if p in seen_b]
    more_a = [p for p in both if len(seen_a[p]) > len(seen_b[p])]
    more_b = [p for p in both if len(seen_b[p]) > len(seen_a[p])]
    out.counts = {
        "prompts_a": len(seen_a),
        "prompts_b": len(seen_b),
        "only_in_a": len(only_a),
        "only_in_b": len(only_b),
        "more_in_a": len(more_a),
        "more_in_b": len(more_b),
    }
    # Listed in the order first consumed (dicts keep insertion order).
    out.only_in_a = [count(p) for p in only_a[:LISTED]]
    out.only_in_b = [count(p) for p in only_b[:LISTED]]
    out.more_in_a = [count(p) for p in more_a[:LISTED]]
    out.more_in_b = [count(p) for p in more_b[:LISTED]]
