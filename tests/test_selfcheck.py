# SPDX-License-Identifier: Apache-2.0
"""areal-debug selfcheck: the same replay command twice, compared with each other
stage by stage and with the recording. The single-controller demo's own
run_replay.sh repeats here and the recording; an SPMD replay with noise from the
operating system's entropy added after each optimizer step
(tests/scripts/noisy_update.py) is found not repeatable, at the weights of the
first mini-batch of step 0."""

import json
import os

import pytest
from support.harness import FAKE_SCRIPT, fake_engine_command, torchrun
from support.recordings import DROPOUT, SPMD_D1_STEPS

from areal_debug.cli import main
from areal_debug.tooling import selfcheck

pytestmark = pytest.mark.areal

NOISY = os.path.join(os.path.dirname(__file__), "scripts", "noisy_update.py")


def run_selfcheck(capsys, *argv) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["selfcheck", "--json", *argv])
    out, err = capsys.readouterr()
    assert out.strip(), f"selfcheck printed no result (exit {rc}): {err[-3000:]}"
    assert out.startswith("{"), out[:2000]
    return rc, json.loads(out)


# The single-controller twin of test_a_planted_nondeterminism_is_found_at_its_stage
# (make test): make test-long, run by CI.
@pytest.mark.variant
def test_the_single_controller_demo_repeats_here_and_the_recording(
    sc_d2, tmp_path, capsys
):
    script = sc_d2.workdir / "run_replay.sh"
    logs = tmp_path / "logs"
    rc, out = run_selfcheck(
        capsys, "--steps", "0-1", "--logs", str(logs), "--", "bash", str(script)
    )
    assert rc == 0 and out["repeatable"] is True, out
    assert [s["step"] for s in out["steps"]] == [0, 1]
    for step in out["steps"]:
        assert step["verdict"] == selfcheck.REPEATS_THE_RECORDING, step
        # Every stage the demo digests, and all its statistics, were compared.
        assert step["stages_compared"] >= 5 and step["metrics_compared"] > 100, step
    reports = [t["report"] for t in out["trials"].values()]
    assert len(set(reports)) == 2 and all(os.path.exists(r) for r in reports)
    assert sorted(os.listdir(logs)) == ["replay-a.log", "replay-b.log"]


def test_a_planted_nondeterminism_is_found_at_its_stage(spmd_d1, tmp_path, capsys):
    overrides = [
        *DROPOUT,
        f"total_train_steps={SPMD_D1_STEPS}",
        "debug.replay_rollout_data=true",
    ]
    cmd, _, _ = fake_engine_command(
        str(spmd_d1.workdir), "noisy", torchrun(1), overrides
    )
    cmd[cmd.index(FAKE_SCRIPT)] = NOISY
    command = [
        "env",
        f"NOISY_TARGET={FAKE_SCRIPT}",
        "AREAL_SPMD_MODE=1",
        "OMP_NUM_THREADS=1",
        *cmd,
    ]
    rc, out = run_selfcheck(
        capsys, "--steps", "0", "--logs", str(tmp_path / "logs"), "--", *command
    )
    assert rc == 1 and out["repeatable"] is False, out
    (step,) = out["steps"]
    assert step["verdict"] == selfcheck.NOT_REPEATABLE
    between = step["between_replays"]
    assert between["stage"] == "weights" and between["mini_batch"] == 0, between
    # Each replay is the recording's up to the noise, so each leaves it there too.
    assert step["against_recording"] is None


def test_steps_and_their_errors():
    assert selfcheck.step_overrides("3-5") == [
        "debug.replay_start_step=3",
        "debug.replay_end_step=5",
    ]
    assert selfcheck.step_overrides("0") == ["debug.replay_end_step=0"]
    with pytest.raises(selfcheck.SelfcheckError, match="ends before it starts"):
        selfcheck.step_overrides("5-3")
    with pytest.raises(selfcheck.SelfcheckError, match="not a step or a range"):
        selfcheck.step_overrides("last")
