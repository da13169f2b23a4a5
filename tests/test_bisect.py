# SPDX-License-Identifier: Apache-2.0
"""``areal-debug bisect`` (areal_debug/bisect/): delta debugging over replays of
one recorded step, and the one-trial oracle for ``git bisect run``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.harness import fake_engine_command

from areal_debug.bisect.delta import ddmin


def _culprits(*needed: str):
    """A predicate moved when every one of ``needed`` is in the subset."""
    tried = []

    def moves(subset):
        tried.append(subset)
        return set(needed) <= set(subset)

    return moves, tried


@pytest.mark.parametrize(
    ("changes", "needed"),
    [
        ("abc", "b"),
        ("abcdef", "e"),
        ("abcdef", "ae"),  # only together
        ("a", "a"),
    ],
)
def test_delta_debugging_finds_the_smallest_set_that_moves_the_step(changes, needed):
    moves, tried = _culprits(*needed)
    found = ddmin(tuple(changes), moves)
    assert found == tuple(needed)
    assert len(tried) == len(set(tried))  # each subset tried once


class _Oracle:
    """Step 5's verdict by a rule instead of a replay (the search's own logic;
    the replays are the test below): moved when all of ``needed`` are set."""

    step = 5

    def __init__(self, *needed: str):
        self.needed = set(needed)

    def run(self, label, overrides):
        from areal_debug.bisect.trial import Outcome, TrialResult

        moved = bool(self.needed) and self.needed <= set(overrides)
        outcome = Outcome.MOVED if moved else Outcome.SAME
        return TrialResult(label, outcome, list(overrides), "loss" if moved else None)


def test_settings_that_move_the_step_only_together_are_named_as_a_set():
    from areal_debug.bisect.settings import bisect_settings

    said = []
    found = bisect_settings(
        _Oracle("b=1", "d=1"), ["a=1", "b=1", "c=1", "d=1"], said.append
    )
    assert found.culprits == ["b=1", "d=1"]
    assert found.harmless == ["a=1", "c=1"]
    assert list(found.moved_by) == ["b=1 d=1"]
    # The replay as is, all four, each alone, then delta debugging's subsets.
    assert len(found.trials) <= 2 + 4 + 16
    assert said[0] == "trial 1 of at most 22: as recorded"
    nothing = bisect_settings(_Oracle(), ["a=1", "b=1"], said.append)
    assert (nothing.culprits, nothing.harmless) == ([], ["a=1", "b=1"])
    assert len(nothing.trials) == 2


# A change the replay trains with: step 1's advantages move.
MOVING = "actor.reward_scaling=3.0"
# A setting of the rollout side, which a replay (no inference) never reads. One:
# how several are tried is the search's logic, checked above without replays.
HARMLESS = "rollout.max_head_offpolicyness=7"


def _bisect(workdir, *args: str, command: tuple = ()) -> subprocess.CompletedProcess:
    """The bisect of the fake-engine script's replay (with ``command``'s
    overrides) under torchrun --standalone: each trial finds a free port."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd, env, _ = fake_engine_command(
        str(workdir),
        "bisect",
        [*launch, "--nproc-per-node=1"],
        ["total_train_steps=2", "debug.replay_rollout_data=true", *command],
    )
    return subprocess.run(
        [sys.executable, "-m", "areal_debug.cli", "bisect", *args, "--", *cmd],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )


@pytest.mark.areal
def test_bisect_names_the_one_setting_that_moves_the_step(bisect_d1, tmp_path):
    workdir = bisect_d1
    logs = tmp_path / "logs"
    run = _bisect(
        workdir, "--step", "1", "--json", "--logs", str(logs),
        "--settings", MOVING, HARMLESS,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)
    assert found["culprits"] == [MOVING]
    assert found["harmless"] == [HARMLESS]
    # reward_scaling scales the rewards GAE turns into advantages.
    assert found["first_stage"][MOVING]["stage"] == "advantages", found
    # The replay as is, both, then each alone: four trials, each of step 1.
    assert [t["changes"] for t in found["trials"]] == [
        [],
        [MOVING, HARMLESS],
        [MOVING],
        [HARMLESS],
    ]
    assert [t["outcome"] for t in found["trials"]] == ["same", "moved", "moved", "same"]
    # Its progress, on stderr with --json: trial k of at most m, what it tries.
    assert "trial 3 of at most 8: actor.reward_scaling=3.0" in run.stderr
    # Each trial replayed step 1 only, from the checkpoint kept after step 0.
    (first_log,) = logs.glob("01-*.log")
    assert "recover checkpoint of step 0 (kept with the recording)" in (
        first_log.read_text()
    )


@pytest.mark.parametrize(
    ("outcome", "status"), [("same", 0), ("moved", 1), ("skip", 125), (None, 125)]
)
def test_the_oracle_exits_with_git_bisect_runs_statuses(
    outcome, status, tmp_path, monkeypatch, capsys
):
    """`bisect --oracle`: one trial of the command as it is, its outcome as `git
    bisect run` reads an exit status (0 good, 1 bad, 125 skip; a trial that cannot
    run skips too). The trial is a replay like the bisect's above (there its
    first, "as recorded", is what the oracle runs); here its outcome is given, so
    that the exit statuses are checked without a replay each."""
    from areal_debug.bisect.trial import BisectError, Outcome, TrialResult, TrialRunner
    from areal_debug.cli import main

    ran = []

    def trial(self, label, overrides, env=None):
        ran.append((label, overrides, self.step))
        if outcome is None:
            raise BisectError("the replay wrote no report")
        stage = "advantages" if outcome == "moved" else None
        return TrialResult(label, Outcome(outcome), [], stage)

    monkeypatch.setattr(TrialRunner, "run", trial)
    argv = ["bisect", "--step", "1", "--oracle", "--logs", str(tmp_path), "--", "x"]
    assert main(argv) == status
    assert ran == [("oracle", [], 1)]
    out, err = capsys.readouterr()
    if outcome == "moved":
        assert "oracle: MOVED, first at advantages" in out
    if outcome is None:
        assert "areal-debug bisect: the replay wrote no report" in err
