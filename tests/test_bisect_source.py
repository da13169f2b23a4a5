# SPDX-License-Identifier: Apache-2.0
"""``areal-debug bisect --areal-source``: the AReaL commit that moved step N, on a
small git history built here from the installed AReaL's own files, with one
planted change and one revision that does not import."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from support.harness import fake_engine_command

# What the test plants in AReaL's PPOActor._compute_advantages (the same line in
# 1.0.4, 2.0.0 and main): the rewards scaled by 1.5 more, so step 1's advantages
# move.
LINE = "reward_score = (reward_score + self.reward_bias) * self.reward_scaling"
PLANTED = LINE + " * 1.5"
ACTOR = os.path.join("areal", "trainer", "ppo", "actor.py")
TRAINER = os.path.join("areal", "trainer", "rl_trainer.py")


def _commit(repo, message: str) -> str:
    subprocess.run(["git", "-C", repo, "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", repo, "commit", "-q", "-m", message],
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )
    return subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def _edit(repo, path: str, old: str, new: str) -> None:
    full = os.path.join(repo, path)
    with open(full) as f:
        text = f.read()
    assert old in text, (path, old)
    with open(full, "w") as f:
        f.write(text.replace(old, new, 1))


def _areal_history(repo) -> dict[str, str]:
    """Four revisions of the installed AReaL: base (good), one that does not
    import, its fix, and the planted change (bad). The bisect tries good and bad,
    then the one between them that does not import (skipped), then its fix (the
    same as good): the planted change is the first that moves the step. Four
    replays, the fewest that try each outcome."""
    import areal

    shutil.copytree(
        os.path.dirname(areal.__file__),
        os.path.join(repo, "areal"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    subprocess.run(["git", "init", "-q", repo], check=True)
    revs = {"good": _commit(repo, "AReaL as installed")}
    trainer = os.path.join(repo, TRAINER)
    with open(trainer) as f:
        source = f.read()
    with open(trainer, "w") as f:
        f.write("import areal_no_such_module\n" + source)
    revs["broken"] = _commit(repo, "does not import")
    with open(trainer, "w") as f:
        f.write(source)
    revs["fixed"] = _commit(repo, "imports again")
    _edit(repo, ACTOR, LINE, PLANTED)
    revs["planted"] = revs["bad"] = _commit(repo, "scale the rewards once more")
    return revs


# test_bisect.py's replayed bisect made again over AReaL's revisions instead of
# settings (the same trials, another search): a variant (make test-long, which
# CI runs).
@pytest.mark.areal
@pytest.mark.variant
def test_a_source_bisect_names_the_planted_revision_and_skips_one_that_does_not_import(
    bisect_d1, tmp_path
):
    workdir = bisect_d1
    repo = str(tmp_path / "areal-src")
    revs = _areal_history(repo)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd, env, _ = fake_engine_command(
        str(workdir),
        "bisect",
        [*launch, "--nproc-per-node=1"],
        ["total_train_steps=2", "debug.replay_rollout_data=true"],
    )
    run = subprocess.run(
        [
            sys.executable, "-m", "areal_debug.cli", "bisect", "--step", "1",
            "--json", "--logs", str(tmp_path / "logs"),
            "--areal-source", repo, "--good", revs["good"], "--bad", revs["bad"],
            "--", *cmd,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout)
    assert found["culprits"] == [revs["planted"]], found
    assert found["subject"] == "scale the rewards once more"
    assert found["first_stage"] == "advantages", found
    assert found["skipped"] == [revs["broken"]]
    outcomes = {t["label"]: t["outcome"] for t in found["trials"]}
    assert outcomes[revs["broken"][:10]] == "skip"
    assert outcomes[revs["good"][:10]] == "same"
    # Each revision was tried from a worktree, removed after its trial.
    assert (
        subprocess.run(
            ["git", "-C", repo, "worktree", "list"], capture_output=True, text=True
        ).stdout.count("\n")
        == 1
    )
