# SPDX-License-Identifier: Apache-2.0
"""Which of the given settings move step N, by replays of step N: each setting
alone (most culprits move the step by themselves, and their trial says where),
and where none does, the smallest set that moves it together (delta debugging);
the others leave it bit for bit: harmless."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from areal_debug.bisect.delta import ddmin
from areal_debug.bisect.trial import BisectError, Outcome, TrialResult, TrialRunner


@dataclass
class SettingsBisect:
    step: int
    settings: list[str]
    culprits: list[str] = field(default_factory=list)
    harmless: list[str] = field(default_factory=list)
    # The culprits' trial (each alone, or the smallest set together).
    moved_by: dict[str, TrialResult] = field(default_factory=dict)
    trials: list[TrialResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "settings": self.settings,
            "culprits": self.culprits,
            "harmless": self.harmless,
            "first_stage": {
                k: {"stage": t.first_stage, "where": t.where}
                for k, t in self.moved_by.items()
            },
            "trials": [t.to_json() for t in self.trials],
        }


def at_most(n: int) -> int:
    """Trials a bisect of ``n`` settings runs at most: the replay as is, all of
    them, each alone, and where none moves it alone, delta debugging's subsets."""
    return 2 + n + (n * n if n > 1 else 0)


def bisect_settings(
    runner: TrialRunner, settings: list[str], say: Callable[[str], None] = print
) -> SettingsBisect:
    """The settings of ``settings`` (``K=V``) that move ``runner.step``."""
    out = SettingsBisect(runner.step, list(settings))
    tried: dict[tuple[str, ...], TrialResult] = {}
    bound = at_most(len(settings))

    def trial(subset: tuple[str, ...]) -> TrialResult:
        if subset not in tried:
            label = " ".join(subset) if subset else "as recorded"
            say(f"trial {len(out.trials) + 1} of at most {bound}: {label}")
            result = runner.run(label, list(subset))
            say(f"  {result.line()}")
            tried[subset] = result
            out.trials.append(result)
        return tried[subset]

    base = trial(())
    if base.outcome is not Outcome.SAME:
        raise BisectError(
            f"Step {runner.step} already leaves the recording with none of the "
            f"settings (first at {base.first_stage}: {base.where}); a bisect needs a "
            f"replay that reproduces it. `areal-debug doctor` says why; log: {base.log}"
        )
    everything = tuple(settings)
    if trial(everything).outcome is Outcome.SAME:
        out.harmless = list(settings)
        return out
    # Each alone first: most culprits move the step by themselves, and their
    # own trial says where.
    for setting in settings:
        alone = trial((setting,))
        if alone.outcome is Outcome.MOVED:
            out.culprits.append(setting)
            out.moved_by[setting] = alone
        else:
            out.harmless.append(setting)
    if out.culprits:
        return out
    # None moves it alone: the smallest set that moves it together (delta
    # debugging); its members are culprits only together.
    smallest = ddmin(everything, lambda s: trial(s).outcome is Outcome.MOVED)
    out.culprits = list(smallest)
    out.harmless = [s for s in settings if s not in smallest]
    out.moved_by[" ".join(smallest)] = trial(smallest)
    return out
