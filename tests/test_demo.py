# SPDX-License-Identifier: Apache-2.0
"""`areal-debug demo` end to end: real GRPO on CPU through the CPU server, replayed."""

import json
import os
import subprocess
import sys

import pytest
from support.harness import rpc_workers

pytestmark = [pytest.mark.areal, pytest.mark.each_areal]

# Two steps: the second trains on weights the first updated on the server.
STEPS = 2


def server_processes(workdir) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [
        line
        for line in out.splitlines()
        if "areal_debug.tooling.cpu_server" in line and str(workdir) in line
    ]


@pytest.mark.parametrize(
    "nproc,extra",
    # `make demo` as shipped (SPMD, one process). Two processes are the same demo
    # code (--nproc only sets torchrun's count) and are covered against the fake
    # engine by tests/test_areal_spmd.py and tests/test_launcher.py.
    [
        pytest.param(1, [], id="spmd-1"),
        pytest.param(
            1,
            ["--single-controller"],
            id="single-controller-1",
            marks=pytest.mark.scheduler,
        ),
    ],
)
def test_demo_records_and_replays_bit_for_bit(tmp_path, nproc, extra):
    wd = tmp_path / "demo"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_debug.cli",
            "demo",
            "--workdir",
            str(wd),
            "--steps",
            str(STEPS),
            "--nproc",
            str(nproc),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    assert f"OK: all {STEPS} steps replayed bit for bit." in out
    assert f"dump: step {STEPS} of {STEPS} done" in out
    assert f"replay: step {STEPS} of {STEPS} done" in out
    assert out.count("(all metrics)") == STEPS
    assert "ppo_actor/update/grad_norm" in out
    assert server_processes(wd) == []
    # The recording was made by AReaL's real SGLang client against the server.
    server_log = (wd / "server.log").read_text()
    assert "Loaded weights from" in server_log
    dump_log = (wd / "dump.log").read_text()
    assert "RemoteInfEngine" in dump_log
    if extra:
        # Single-controller runs start RPC workers; none may outlive the demo.
        assert rpc_workers(wd) == []
        return
    # run_replay.sh replays again, passing its arguments on as overrides (in one
    # mode: the script differs between the modes only in its command, see
    # test_the_replay_script_runs_the_demos_mode). No fixed port: its launcher
    # picks free ones. Run from another directory: it holds only absolute paths.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rerun = subprocess.run(
        ["bash", str(wd / "run_replay.sh"), "debug.replay_trial_name=again"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=elsewhere,
    )
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    (report,) = (wd / "root" / "logs").rglob("again/replay_report.json")
    summary = json.loads(report.read_text())["summary"]
    assert summary["all_identical"] is True and summary["steps"] == STEPS


@pytest.mark.parametrize("sc", [False, True], ids=["spmd", "single-controller"])
def test_the_replay_script_runs_the_demos_mode(tmp_path, sc):
    from areal_debug.tooling.demo import write_replay_script

    script = write_replay_script(tmp_path, 1, STEPS, sc).read_text()
    (command,) = [line for line in script.splitlines() if line.startswith("exec ")]
    assert command.endswith(' "$@"') and f"AREAL_DEBUG_WORKDIR={tmp_path}" in command
    assert "debug.replay_rollout_data=true" in command
    if sc:
        # A leftover AREAL_SPMD_MODE=1 in the user's shell would switch modes.
        assert "-u AREAL_SPMD_MODE" in command and "launcher" not in command
        assert "tiny_cpu_sc.yaml" in command
    else:
        assert "areal_debug.launcher.local" in command
