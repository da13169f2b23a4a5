# SPDX-License-Identifier: Apache-2.0
"""Which AReaL commit moved step N: ``git bisect`` over a checkout of AReaL, each
revision tried in front of the installed AReaL (a worktree on ``PYTHONPATH``, no
reinstall), one that does not import skipped as ``git bisect skip`` does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from areal_debug.bisect.trial import BisectError, Outcome, TrialResult, TrialRunner


def git(repo: str, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", repo, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BisectError(
            f"git {' '.join(args)} in {repo} failed: {done.stderr.strip()}"
        )
    return done.stdout.strip()


@dataclass
class Revision:
    sha: str
    subject: str


@dataclass
class SourceBisect:
    step: int
    good: str
    bad: str
    culprit: Revision | None = None
    first: TrialResult | None = None
    skipped: list[str] = field(default_factory=list)
    # Where skipped revisions leave the culprit among several: their hashes.
    candidates: list[str] = field(default_factory=list)
    trials: list[TrialResult] = field(default_factory=list)

    def line(self) -> str:
        """What the bisect found, in one line."""
        skipped = (
            f"; skipped (does not import): {len(self.skipped)}" if self.skipped else ""
        )
        if self.culprit is None:
            return (
                f"step {self.step}: the first revision that moves it is one of "
                f"{', '.join(c[:10] for c in self.candidates)}{skipped}"
            )
        where = f" ({self.first.where})" if self.first and self.first.where else ""
        stage = self.first.first_stage if self.first else "?"
        return (
            f"step {self.step}: first moved by {self.culprit.sha} "
            f'"{self.culprit.subject}", first at {stage}{where}{skipped}'
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "good": self.good,
            "bad": self.bad,
            "culprits": [self.culprit.sha] if self.culprit else [],
            "subject": self.culprit.subject if self.culprit else None,
            "first_stage": self.first.first_stage if self.first else None,
            "where": self.first.where if self.first else None,
            "skipped": self.skipped,
            "candidates": self.candidates,
            "trials": [t.to_json() for t in self.trials],
        }


def revisions(repo: str, good: str, bad: str) -> list[Revision]:
    """The revisions after ``good`` up to ``bad``, oldest first (first parents)."""
    lines = git(
        repo, "log", "--first-parent", "--reverse", "--format=%H %s", f"{good}..{bad}"
    ).splitlines()
    return [
        Revision(*line.split(" ", 1)) if " " in line else Revision(line, "")
        for line in lines
    ]


def imports_from(worktree: str, env: dict[str, str]) -> str | None:
    """Why AReaL from ``worktree`` does not import (None: it does, from there)."""
    probe = (
        "import os, sys, areal, areal.trainer.rl_trainer\n"
        "sys.exit(0 if os.path.realpath(areal.__file__).startswith("
        f"os.path.realpath({worktree!r})) else 3)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env
    )
    if done.returncode == 0:
        return None
    if done.returncode == 3:
        return f"areal did not import from {worktree} (its root holds no areal/?)"
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"AReaL does not import: {last}"


def bisect_source(
    runner: TrialRunner,
    repo: str,
    good: str,
    bad: str,
    say: Callable[[str], None] = print,
) -> SourceBisect:
    repo = os.path.abspath(repo)
    good_sha, bad_sha = git(repo, "rev-parse", good), git(repo, "rev-parse", bad)
    revs = revisions(repo, good_sha, bad_sha)
    if not revs:
        raise BisectError(f"{bad} is not after {good} in {repo}: nothing to bisect.")
    out = SourceBisect(runner.step, good_sha, bad_sha)
    bound = 2 + max(1, len(revs)).bit_length() + 1
    tried: dict[str, TrialResult] = {}

    def trial(sha: str) -> TrialResult:
        if sha in tried:
            return tried[sha]
        say(f"trial {len(out.trials) + 1} of about {bound}: AReaL at {sha[:10]}")
        worktree = os.path.join(runner.logs, f"areal-{sha[:10]}")
        shutil.rmtree(worktree, ignore_errors=True)
        git(repo, "worktree", "add", "--detach", "--force", worktree, sha)
        try:
            path = os.environ.get("PYTHONPATH", "")
            env = {"PYTHONPATH": os.pathsep.join(p for p in (worktree, path) if p)}
            why = imports_from(worktree, {**os.environ, **env})
            if why is not None:
                result = TrialResult(sha[:10], Outcome.SKIP, why=why)
            else:
                result = runner.run(sha[:10], [], env)
        finally:
            git(repo, "worktree", "remove", "--force", worktree)
        say(f"  {result.line()}")
        tried[sha] = result
        out.trials.append(result)
        return result

    if trial(good_sha).outcome is not Outcome.SAME:
        raise BisectError(
            f"At the good revision {good} step {runner.step} does not replay bit for "
            f"bit ({tried[good_sha].line()}): pick a good revision that does."
        )
    if trial(bad_sha).outcome is not Outcome.MOVED:
        raise BisectError(
            f"At the bad revision {bad} step {runner.step} does not move "
            f"({tried[bad_sha].line()}): nothing to bisect."
        )
    lo, hi = -1, len(revs) - 1  # revs[lo] same (-1: good), revs[hi] moved
    while hi - lo > 1:
        mid = _testable(revs, lo, hi, trial)
        if mid is None:
            break
        if tried[revs[mid].sha].outcome is Outcome.MOVED:
            hi = mid
        else:
            lo = mid
    out.skipped = [s for s, t in tried.items() if t.outcome is Outcome.SKIP]
    between = revs[lo + 1 : hi + 1]
    if len(between) == 1:
        out.culprit, out.first = between[0], tried[between[0].sha]
    else:
        out.candidates = [r.sha for r in between]
    return out


def _testable(revs, lo, hi, trial) -> int | None:
    """A revision between ``lo`` and ``hi`` that tells same from moved, nearest
    the middle; None where every one between is skipped."""
    mid = (lo + hi) // 2
    order = sorted(range(lo + 1, hi), key=lambda i: (abs(i - mid), i))
    for i in order:
        if trial(revs[i].sha).outcome is not Outcome.SKIP:
            return i
    return None
