# SPDX-License-Identifier: Apache-2.0
"""The CPU demo (``areal-debug demo``) as the benchmarks run it: once per
``make bench`` into one work directory, which replay_wait.py makes and
compression.py and stage_digest_cost.py read again (``--reuse``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from areal_debug.tooling.demo import EXPERIMENT, TRIAL


def run_demo(workdir: Path, steps: int) -> None:
    """Record and replay ``steps`` demo steps in ``workdir``; on a failure, the
    demo's output's tail on stderr and exit 1."""
    demo = subprocess.run(
        [sys.executable, "-m", "areal_debug.cli", "demo"]
        + ["--workdir", str(workdir), "--steps", str(steps)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
    )
    if demo.returncode != 0:
        print(demo.stdout[-2000:] + demo.stderr[-2000:], file=sys.stderr)
        raise SystemExit(1)


def run_logged(wd: Path, name: str, cmd: list[str], env: dict) -> float:
    """Run ``cmd`` logging to ``wd/<name>.log``; its wall time. On a failure,
    exit naming the run, with its log's tail."""
    t0 = time.monotonic()
    with open(wd / f"{name}.log", "w") as log:
        rc = subprocess.run(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT
        ).returncode
    if rc != 0:
        tail = (wd / f"{name}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"the {name} run in {wd} failed ({rc}):\n{tail}")
    return time.monotonic() - t0


def demo_recording(workdir: Path) -> str:
    """The demo's dump recording in ``workdir``."""
    return str(workdir / "root" / EXPERIMENT / TRIAL / "areal_debug_recording")


def add_demo_arguments(ap: argparse.ArgumentParser, steps_help: str) -> None:
    """``--steps``, ``--workdir`` and ``--reuse``: where the demo runs, or ran."""
    ap.add_argument("--steps", type=int, default=4, help=steps_help)
    ap.add_argument("--workdir", default=None, help="the CPU demo's directory")
    ap.add_argument(
        "--reuse", action="store_true", help="read the demo already run in --workdir"
    )
