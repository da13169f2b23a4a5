# SPDX-License-Identifier: Apache-2.0
"""`make gpu-check` (benchmarks/gpu_check/run.sh) on CPU: the script a lent GPU
machine runs, kept working here.

It runs with this venv's packages (``GPU_CHECK_WHEELS=none``: nothing installed,
nothing downloaded) but with the import-only stand-ins for ray, wandb, swanlab and
trackio on PYTHONPATH, as on the device, so the demo proves them enough for AReaL's
trainer. The demo's own behaviour is tests/test_demo.py's and gpu_step.py's CPU run
tests/test_bench_gpu.py's: here the demo records and replays one step, gpu_step is
left out, and dump_overhead runs a small batch. What is checked is the plumbing:
each step run in turn under its limit, a failed one not stopping the next, the
summary, the exit status and the files left for the device tool to bring back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check" / "run.sh"
SUMMARY = re.compile(
    r"^\[gpu-check\] (?P<name>\S+)\s+(?P<status>ok|MISS \(.*?\)|FAILED \(.*?\)|"
    r"SKIPPED \(.*?\))\s+(?P<secs>\d+) s$",
    re.M,
)
# dump_overhead on a small batch: all seven figures in about half a minute here
# (the 1 GiB writer step, whatever the batch, is most of it).
SMALL_DUMP_OVERHEAD = (
    "--prompts 16 --seqlen 512 --steps 3 --loop-steps 5 --loop-blocks 1 --gib-steps 1"
)


def run_check(tmp_path: Path, steps: str, **env: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir()
    return subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "GPU_CHECK_WHEELS": "none",
            "GPU_CHECK_WORK": str(tmp_path / "work"),
            "GPU_CHECK_STEPS": steps,
            "OUT": str(out),
            "OMP_NUM_THREADS": "1",
            **env,
        },
    )


def summary(run: subprocess.CompletedProcess) -> dict[str, str]:
    tail = run.stdout[run.stdout.rindex("[gpu-check] summary") :]
    return {m["name"]: m["status"] for m in SUMMARY.finditer(tail)}


def demo_processes(workdir: Path) -> list[int]:
    """Processes started for the demo in ``workdir`` (its server and trainers
    carry it in their environment)."""
    found = []
    needle = f"AREAL_DEBUG_WORKDIR={workdir}".encode()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env:
            found.append(int(p.name))
    return found


@pytest.mark.areal  # the demo and selfcheck run AReaL's trainer
@pytest.mark.rehearsal  # four minutes of a tool for another machine: CI runs it
def test_gpu_check_runs_every_step_and_sums_up(tmp_path):
    run = run_check(
        tmp_path,
        "demo selfcheck dump_overhead nosuch",
        GPU_CHECK_DEMO_STEPS="1",
        GPU_CHECK_DUMP_OVERHEAD_ARGS=SMALL_DUMP_OVERHEAD,
    )
    said = run.stdout[-4000:] + run.stderr[-3000:]
    statuses = summary(run)
    assert list(statuses) == ["demo", "selfcheck", "dump_overhead", "nosuch"], said
    assert statuses["demo"] == "ok" and statuses["selfcheck"] == "ok", said
    # Its figures are judged by make bench, not here: it ran to its end.
    assert statuses["dump_overhead"] in (
        "ok",
        "MISS (a figure missed its target)",
    ), said
    assert statuses["nosuch"] == "FAILED (unknown step)"
    # A failed step fails the check, after the others ran.
    assert run.returncode == 1, said

    out = tmp_path / "out"
    assert "device cpu" in (out / "summary.txt").read_text()
    setup = (out / "setup.log").read_text()
    # The stand-in, not this venv's ray, is what AReaL imported.
    assert re.search(
        r"^ray "
        + re.escape(str(tmp_path / "work" / "standins" / "ray" / "__init__.py"))
        + "$",
        setup,
        re.M,
    )
    demo = (out / "demo.log").read_text()
    assert "OK: all 1 steps replayed bit for bit." in demo
    assert "(all metrics)" in demo
    report = json.loads((out / "replay_report.json").read_text())
    assert report["summary"]["all_identical"] is True
    # Step 0's layers (the script's default debug.layer_digests=0), on the
    # device where there is one, compared identical by the replay.
    layers = report["steps"][0]["stages"]["logp"]["layers"]
    assert layers["status"] == "identical" and layers["modules"] == 12, layers
    selfcheck = (out / "selfcheck.log").read_text()
    assert "step 0: repeatable here, and the recording's" in selfcheck
    assert "Repeatable on this machine: 1 step(s)" in selfcheck
    # The recording's step table (areal-debug inspect), for the device's run.
    with tarfile.open(out / "demo-runs.tar.gz") as tar:
        table = tar.extractfile("recording.txt").read().decode()
    assert re.search(r"^steps\s+\S+ complete$", table, re.M), table
    figures = re.findall(
        r"^[a-z_]+(?:\[\w+\])?: \S+ \(median of .*\) (?:ok|MISS)$",
        (out / "dump_overhead.log").read_text(),
        re.M,
    )
    assert len(figures) == 7, (out / "dump_overhead.log").read_text()[-3000:]
    # What the device tool brings back: at most 8 files, no folders.
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "demo-runs.tar.gz",
        "demo.log",
        "dump_overhead.log",
        "replay_report.json",
        "selfcheck.log",
        "setup.log",
        "summary.txt",
    ]
    assert demo_processes(tmp_path / "work" / "demo") == []


@pytest.mark.areal
@pytest.mark.lifecycle
@pytest.mark.production_gc
def test_a_step_past_its_limit_is_stopped_and_leaves_no_process(tmp_path):
    """The demo stopped at its limit, mid-run: the summary says so, and neither
    its CPU server nor its trainer (sessions of their own, which the device tool
    would leave running beside the next step) outlives it."""
    t0 = time.monotonic()
    run = run_check(tmp_path, "demo", GPU_CHECK_BUDGET_DEMO="40")
    said = run.stdout[-4000:] + run.stderr[-3000:]
    assert summary(run) == {"demo": "FAILED (timed out at 40 s)"}, said
    assert run.returncode == 1, said
    assert (
        "[2/4] record: starting the CPU inference server"
        in (tmp_path / "out" / "demo.log").read_text()
    )
    assert demo_processes(tmp_path / "work" / "demo") == []
    assert time.monotonic() - t0 < 120, said
