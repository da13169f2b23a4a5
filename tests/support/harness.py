# SPDX-License-Identifier: Apache-2.0
"""Run AReaL training entry scripts under torchrun for the process-level tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
FAKE_SCRIPT = os.path.join(TESTS, "scripts", "train_fake_engine.py")
FAKE_CONFIG = os.path.join(TESTS, "configs", "tiny_fake.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Run:
    returncode: int
    log: str
    stats: list[dict]

    def stats_by_step(self) -> dict[int, dict]:
        return {s["global_step"]: s["stats"] for s in self.stats}


def run_torchrun(
    workdir: str,
    name: str,
    nproc: int,
    overrides: list[str],
    env: dict | None = None,
    timeout: float = 600,
) -> Run:
    """Run the fake-engine script under torchrun."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--master-port={free_port()}",
    ]
    return _run(workdir, name, cmd, overrides, env, timeout)


def run_launcher(
    workdir: str,
    name: str,
    overrides: list[str],
    env: dict | None = None,
    timeout: float = 600,
) -> Run:
    """Run the fake-engine script through areal_debug.launcher.local."""
    cmd = [sys.executable, "-m", "areal_debug.launcher.local"]
    return _run(workdir, name, cmd, overrides, env, timeout)


def _run(workdir, name, launch, overrides, env, timeout) -> Run:
    """Every process started is ended, also on timeout."""
    stats_file = os.path.join(workdir, f"{name}.stats.jsonl")
    log_file = os.path.join(workdir, f"{name}.log")
    if os.path.exists(stats_file):
        os.unlink(stats_file)
    # AReaL's launcher checks that both exist.
    os.makedirs(os.path.join(workdir, "root", "name_resolve"), exist_ok=True)
    cmd = [
        *launch,
        FAKE_SCRIPT,
        "--config",
        FAKE_CONFIG,
        f"cluster.fileroot={workdir}/root",
        f"actor.path={workdir}/model",
        f"train_dataset.path={workdir}/data.jsonl",
        *overrides,
    ]
    full_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "AREAL_SPMD_MODE": "1",
        "AREAL_DEBUG_TEST_STATS": stats_file,
        **(env or {}),
    }
    with open(log_file, "w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        finally:
            # torchrun's workers are in the same session: end them all.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    stats = []
    if os.path.exists(stats_file):
        with open(stats_file) as f:
            stats = [json.loads(line) for line in f if line.strip()]
    with open(log_file) as f:
        return Run(rc, f.read(), stats)


def recording_dir(workdir: str, experiment: str = "tiny", trial: str = "t0") -> str:
    return os.path.join(workdir, "root", experiment, trial, "areal_debug_recording")


def replay_report(
    workdir: str, experiment: str = "tiny", trial: str = "t0_replay"
) -> dict:
    import glob

    (path,) = glob.glob(
        os.path.join(
            workdir, "root", "logs", "*", experiment, trial, "replay_report.json"
        )
    )
    with open(path) as f:
        return json.load(f)
