# SPDX-License-Identifier: Apache-2.0
"""Single-controller mode on Ray (``scheduler.type: ray``), for real.

The test starts a Ray cluster on this machine (CPU resources only, free ports,
its own temp dir), records the shipped example against the CPU server with
AReaL's RayScheduler, replays it on the same cluster with no server and no
rollout worker, and ends every Ray process it started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from support.harness import recording_dir, replay_report, run_logged

from areal_debug.recording.reader import RecordingReader
from areal_debug.testing import end_process, example_command, run_env, start_server

pytestmark = pytest.mark.areal

EXPERIMENT = "tinydemo"
STEPS = 2


def processes_with(marker: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if marker in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def ray_workdir(tmp_path_factory, tiny_assets) -> Path:
    d = tmp_path_factory.mktemp("ray")
    os.symlink(tiny_assets / "model", d / "model")
    os.symlink(tiny_assets / "data.jsonl", d / "data.jsonl")
    os.makedirs(d / "root" / "name_resolve")
    return d


@pytest.fixture(scope="module")
def ray_cluster(ray_workdir):
    """A head node started with ``ray start --block`` in its own session: ending
    that session ends the whole cluster (``ray stop`` would end every Ray of the
    machine). Yields the address for RAY_ADDRESS."""
    # Short: Ray's AF_UNIX socket paths live under it.
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = {
        **run_env(ray_workdir, sc=True),
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    cmd = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        "--block",
        "--port=0",
        "--num-cpus=3",
        "--num-gpus=0",
        f"--memory={12 * 1024**3}",
        f"--object-store-memory={512 * 1024**2}",
        "--include-dashboard=false",
        "--dashboard-agent-listen-port=0",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={temp}",
    ]
    with open(ray_workdir / "ray.log", "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        addr_file = Path(temp, "ray_current_cluster")
        deadline = time.monotonic() + 180
        while not addr_file.exists():
            assert proc.poll() is None, (ray_workdir / "ray.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Ray did not start in 180 s"
            time.sleep(0.5)
        time.sleep(1)  # the file is written before the node is fully up
        yield addr_file.read_text().strip()
    finally:
        end_process(proc)
        deadline = time.monotonic() + 30
        while processes_with(temp) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = processes_with(temp)
        for p in psutil.process_iter(["cmdline"]):
            if temp in " ".join(p.info["cmdline"] or []):
                p.kill()
        shutil.rmtree(temp, ignore_errors=True)
        assert left == [], f"Ray processes outlived the cluster: {left}"


def run_on_ray(workdir, ray_address, name, overrides, server_addr=None):
    env = {
        **run_env(workdir, sc=True, server_addr=server_addr),
        "RAY_ADDRESS": ray_address,
    }
    cmd = example_command(
        "dump",
        sc=True,
        overrides=[
            "scheduler.type=ray",
            f"total_train_steps={STEPS}",
            "trial_name=ray",
            *overrides,
        ],
    )
    return run_logged(cmd, str(workdir), name, env, 900)


@pytest.fixture(scope="module")
def ray_dump(ray_workdir, ray_cluster):
    proc, addr = start_server(ray_workdir, run_env(ray_workdir, sc=True))
    try:
        rc, log = run_on_ray(
            ray_workdir, ray_cluster, "dump", ["debug.dump_rollout_data=true"], addr
        )
    finally:
        end_process(proc)
    assert rc == 0, log[-4000:]
    return log


def test_dump_with_the_ray_scheduler(ray_workdir, ray_dump):
    assert "RayScheduler" in ray_dump
    reader = RecordingReader(recording_dir(str(ray_workdir), EXPERIMENT, "ray"))
    assert reader.available_steps() == list(range(STEPS))
    assert reader.manifest.config["scheduler"]["type"] == "ray"
    # debug.deterministic (shipped config) reached the Ray actors' processes through
    # Ray's worker set-up hook: the actor and the rollout worker report it.
    workers = reader.manifest.worker_determinism
    assert len(workers) >= 2 and all(
        w["torch_deterministic_algorithms"] for w in workers
    ), workers


def test_replay_with_the_ray_scheduler_is_bitwise(ray_workdir, ray_cluster, ray_dump):
    rc, log = run_on_ray(
        ray_workdir,
        ray_cluster,
        "replay",
        ["debug.replay_rollout_data=true", "debug.replay_trial_name=ray_replay"],
    )
    assert rc == 0, log[-4000:]
    assert "role 'rollout'" not in log
    report = replay_report(str(ray_workdir), EXPERIMENT, "ray_replay")
    assert report["summary"]["all_identical"] is True
    assert report["summary"]["steps"] == STEPS
