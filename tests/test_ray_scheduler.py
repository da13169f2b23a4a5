# SPDX-License-Identifier: Apache-2.0
"""Single-controller mode on Ray (``scheduler.type: ray``), for real.

The test starts a Ray cluster on this machine (CPU resources only, free ports,
its own temp dir), records the shipped example against the CPU server with
AReaL's RayScheduler on two FSDP train workers, keeping a recover checkpoint
after every step, replays its last step from the kept checkpoint on the same
cluster with no server and no rollout worker, and ends every Ray process it
started. (The same replay from step N under AReaL's local scheduler is the one a
person runs most; both schedulers restore through the same controller code, so
the suite runs it once, here.)
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from support.harness import (
    assert_identical,
    assert_only_in_dump,
    recording_dir,
    replay_report,
    run_logged,
)
from support.scripts import RAY_SEED
from support.waiting import wait_until
from support.workdirs import make_workdir

from areal_debug.recording.reader import RecordingReader
from areal_debug.testing import end_process, example_command, run_env, start_server

# The single-controller dump and replay of the suite's other tests, made again under
# AReaL's other scheduler: a variant (make test-long, which CI runs).
pytestmark = [
    pytest.mark.areal,
    pytest.mark.scheduler(seed=RAY_SEED),
    pytest.mark.variant,
]

EXPERIMENT = "tinydemo"
STEPS = 2
# Two train workers: the kept checkpoint is restored shard by shard.
TRAIN_D2 = ["actor.backend=fsdp:d2", "allocation_mode=sglang:d1+fsdp:d2"]


def _accepts(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def processes_with(marker: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if marker in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def ray_workdir(tmp_path_factory, tiny_assets) -> Path:
    return make_workdir(tmp_path_factory.mktemp("ray"), tiny_assets)


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
        # One logical CPU per worker: two train workers and the rollout worker
        # (nothing evaluates: a dump starts no eval-rollout worker).
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
        wait_until(
            addr_file.exists,
            180,
            "Ray did not start",
            interval=0.5,
            give_up=lambda: None
            if proc.poll() is None
            else (ray_workdir / "ray.log").read_text()[-3000:],
        )
        # The file is written before the node serves: wait for its GCS port.
        addr = addr_file.read_text().strip()
        wait_until(lambda: _accepts(addr), 60, f"Ray's GCS at {addr} never answered")
        yield addr
    finally:
        end_process(proc)
        try:
            wait_until(lambda: not processes_with(temp), 30, "", interval=0.5)
        except AssertionError:
            pass  # what is left is killed and named below
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
            f"seed={RAY_SEED}",
            f"total_train_steps={STEPS}",
            "trial_name=ray",
            *TRAIN_D2,
            *overrides,
        ],
    )
    return run_logged(cmd, str(workdir), name, env, 900)


@pytest.fixture(scope="module")
def ray_dump(ray_workdir, ray_cluster):
    proc, addr = start_server(ray_workdir, run_env(ray_workdir, sc=True))
    try:
        rc, log = run_on_ray(
            ray_workdir,
            ray_cluster,
            "dump",
            [
                "debug.dump_rollout_data=true",
                "recover.mode=on",
                "++recover.freq_steps=1",
            ],
            addr,
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
    assert reader.manifest.layout.world_size == 2
    # debug.deterministic (shipped config) reached the Ray actors' processes through
    # Ray's worker set-up hook: the actor and the rollout worker report it.
    workers = reader.manifest.worker_determinism
    assert len(workers) >= 2 and all(
        w["torch_deterministic_algorithms"] for w in workers
    ), workers


def test_replay_from_step_n_with_the_ray_scheduler_restores_the_kept_checkpoint(
    ray_workdir, ray_cluster, ray_dump
):
    last = STEPS - 1
    rc, log = run_on_ray(
        ray_workdir,
        ray_cluster,
        "replay",
        [
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=ray_replay",
            f"debug.replay_start_step={last}",
        ],
    )
    assert rc == 0, log[-4000:]
    assert_only_in_dump(ray_dump, log, ["role 'rollout'"])
    assert f"recover checkpoint of step {last - 1} (kept with the recording)" in log
    # The two workers' restored weights are the dump run's after that step.
    assert (
        f"Replay: the model is the recorded one (the dump run's weights after step "
        f"{last - 1}" in log
    )
    report = replay_report(str(ray_workdir), EXPERIMENT, "ray_replay")
    assert [e["global_step"] for e in report["steps"]] == [last]
    assert_identical(report)
