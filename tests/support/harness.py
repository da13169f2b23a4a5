# SPDX-License-Identifier: Apache-2.0
"""Run AReaL training entry scripts under torchrun for the process-level tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from areal_debug.testing import free_port

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
FAKE_SCRIPT = os.path.join(TESTS, "scripts", "train_fake_engine.py")
FAKE_CONFIG = os.path.join(TESTS, "configs", "tiny_fake.yaml")


@dataclass
class Run:
    returncode: int
    log: str
    stats: list[dict]

    def stats_by_step(self) -> dict[int, dict]:
        return {s["global_step"]: s["stats"] for s in self.stats}


def torchrun(nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--master-port={free_port()}",
    ]


def run_torchrun(
    workdir: str,
    name: str,
    nproc: int,
    overrides: list[str],
    env: dict | None = None,
    timeout: float = 600,
) -> Run:
    """Run the fake-engine script under torchrun. A master port another process
    took between ``free_port`` and torchrun's listen (the port is free when
    picked, not reserved) is picked again, once."""
    run = _run(workdir, name, torchrun(nproc), overrides, env, timeout)
    if run.returncode != 0 and _master_port_taken(run.log):
        run = _run(workdir, name, torchrun(nproc), overrides, env, timeout)
    return run


def _master_port_taken(log: str) -> bool:
    return "server socket has failed to listen" in log and "EADDRINUSE" in log


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


def fake_engine_command(workdir, name, launch, overrides, env=None):
    """(command, environment, stats file) of the fake-engine script under ``launch``."""
    stats_file = os.path.join(workdir, f"{name}.stats.jsonl")
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
    return cmd, full_env, stats_file


def _run(workdir, name, launch, overrides, env, timeout) -> Run:
    cmd, full_env, stats_file = fake_engine_command(
        workdir, name, launch, overrides, env
    )
    rc, log = run_logged(cmd, workdir, name, full_env, timeout)
    stats = []
    if os.path.exists(stats_file):
        with open(stats_file) as f:
            stats = [json.loads(line) for line in f if line.strip()]
    return Run(rc, log, stats)


def start_logged(cmd, workdir, name, env) -> subprocess.Popen:
    """Start ``cmd`` in its own session, output to ``<workdir>/<name>.log``."""
    with open(os.path.join(workdir, f"{name}.log"), "w") as log:
        return subprocess.Popen(
            cmd,
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )


def _default_sigint() -> None:
    # A suite started in the background (`make test &`) runs with SIGINT ignored,
    # which children inherit: Python then never raises KeyboardInterrupt. A run
    # started from a terminal has the default; the tests start runs the same way.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def end_session(proc: subprocess.Popen) -> None:
    """Kill whatever is left of a session started by ``start_logged``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# What werkzeug prints when an AReaL RPC worker cannot bind the port its scheduler
# gave it. AReaL's LocalScheduler checks a port is free, then starts the worker,
# which binds it seconds later, once it has imported torch; another process may
# take it meanwhile (seen once in five CI runs, seed 4's online agent dump). The
# scheduler only retries a worker that exits within 0.1 s: this one's exit went
# unnoticed, and the run waited for the whole test timeout (900 s).
PORT_TAKEN = "is in use by another program"
# What AReaL logs when it did notice, and chose new ports itself.
PORT_RETRIED = "retrying with new ports"
# How long a run whose worker lost its port is given to recover on its own.
PORT_GRACE_S = 30.0
# How often a run's log is read for it.
WATCH_S = 2.0


def run_logged(cmd, workdir, name, env, timeout) -> tuple[int, str]:
    """Every process started is ended, also on timeout. A run whose AReaL worker
    lost its port to another process (``PORT_TAKEN``) and that AReaL does not
    recover is ended and started once more, its first log kept beside the
    second (``<name>.port-taken.log``)."""
    log_path = os.path.join(workdir, f"{name}.log")
    rc = _run_watched(cmd, workdir, name, env, timeout)
    if rc is None:
        os.replace(log_path, os.path.join(workdir, f"{name}.port-taken.log"))
        print(
            f"{name}: an AReaL worker's port was taken by another process; "
            "the run is started again",
            file=sys.stderr,
        )
        rc = _run_watched(cmd, workdir, name, env, timeout)
        if rc is None:
            rc = -1  # twice: the log says why
    # A log may name paths that are not valid UTF-8.
    with open(log_path, errors="replace") as f:
        return rc, f.read()


def _run_watched(cmd, workdir, name, env, timeout) -> int | None:
    """The run's exit code, or None if it was ended because a worker's port was
    taken and AReaL did not choose another within ``PORT_GRACE_S``."""
    log_path = os.path.join(workdir, f"{name}.log")
    proc = start_logged(cmd, workdir, name, env)
    deadline = time.monotonic() + timeout
    seen = _LogWatch(log_path)
    try:
        while True:
            try:
                left = max(0.0, deadline - time.monotonic())
                return proc.wait(timeout=min(WATCH_S, left))
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
            if seen.port_lost_for() > PORT_GRACE_S:
                return None
    finally:
        # torchrun's workers are in the same session: end them all.
        end_session(proc)


def example_command(mode: str, overrides: list[str], nproc: int = 1) -> list[str]:
    """The shipped example as the demo starts it: under torchrun (``spmd``, also
    for replays) or as a plain process, the controller (``single-controller``)."""
    from areal_debug import testing

    sc = mode == "single-controller"
    return testing.example_command("dump", nproc, sc, overrides)


def example_env(workdir, mode: str, server_addr: str | None = None) -> dict:
    from areal_debug.testing import run_env

    return run_env(workdir, mode == "single-controller", server_addr)


class _LogWatch:
    """Reads a run's log as it grows (only what is new each time), for
    ``PORT_TAKEN`` not followed by AReaL's own ``PORT_RETRIED``."""

    def __init__(self, path: str):
        self._path = path
        self._offset = 0
        self._tail = ""
        self._taken_at: float | None = None
        self._retried = False

    def port_lost_for(self) -> float:
        """Seconds since a worker's port was seen taken (0: not seen, or AReaL
        chose new ports)."""
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            new = f.read()
        self._offset += len(new)
        text = self._tail + new.decode(errors="replace")
        self._tail = text[-64:]  # a line split between two reads
        self._retried = self._retried or PORT_RETRIED in text
        if self._taken_at is None and PORT_TAKEN in text:
            self._taken_at = time.monotonic()
        if self._taken_at is None or self._retried:
            return 0.0
        return time.monotonic() - self._taken_at


def run_example(
    workdir,
    name: str,
    mode: str,
    overrides: list[str],
    server_addr: str | None = None,
    nproc: int = 1,
    timeout: float = 600,
) -> Run:
    os.makedirs(os.path.join(workdir, "root", "name_resolve"), exist_ok=True)
    cmd = example_command(mode, overrides, nproc)
    env = example_env(workdir, mode, server_addr)
    rc, log = run_logged(cmd, str(workdir), name, env, timeout)
    return Run(rc, log, [])


def rpc_workers(workdir) -> list:
    """Live AReaL RPC worker processes of runs under ``workdir``."""
    import psutil

    found = []
    marker = f"{workdir}/root"
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "rpc_server" not in cmdline or marker not in cmdline:
            continue
        if proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


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


# Statistics of the whole step's batch: a re-split for another data-parallel
# layout must leave them as recorded (counts and extremes exactly, means up to
# the summation order).
WHOLE_BATCH_EXACT = (
    "ppo_actor/n_seqs",
    "ppo_actor/n_tokens",
    "ppo_actor/task_reward/min",
    "ppo_actor/task_reward/max",
    "ppo_actor/seq_len/min",
    "ppo_actor/seq_len/max",
)
WHOLE_BATCH_CLOSE = ("ppo_actor/task_reward/avg", "ppo_actor/seq_len/avg")


def assert_whole_batch_statistics_kept(report: dict) -> None:
    """Every replayed step saw exactly the recorded batch, however it was split."""
    import math

    assert report["steps"]
    for entry in report["steps"]:
        metrics, step = entry["metrics"], entry["global_step"]
        for name in WHOLE_BATCH_EXACT:
            m = metrics[name]
            assert m["replayed"] == m["recorded"], (step, name, m)
        for name in WHOLE_BATCH_CLOSE:
            m = metrics[name]
            assert math.isclose(m["replayed"], m["recorded"], rel_tol=1e-6), (
                step,
                name,
                m,
            )


def assert_only_in_dump(dump_log: str, replay_log: str, texts) -> None:
    """Each text is in the dump's log and not in the replay's: what AReaL logs
    as it starts something the replay must not start, shown to be detectable."""
    for text in texts:
        assert text in dump_log, f"the dump never logged {text!r}"
        assert text not in replay_log, f"the replay logged {text!r}"


def assert_identical(report: dict) -> None:
    """Every step of a replay report is identical; otherwise name each step's
    first divergence (what a failed CI run must show to be understood)."""
    summary = report["summary"]
    if summary["all_identical"] is True:
        return
    lines = [f"first divergence: {summary.get('first_divergence')}"]
    for s in report["steps"]:
        if s.get("status") != "identical":
            differing = {
                k: v
                for k, v in s.get("metrics", {}).items()
                if not v.get("identical", True)
            }
            stages = {
                k: v
                for k, v in s.get("stages", {}).items()
                if v.get("status") != "identical"
            }
            lines.append(
                f"step {s.get('global_step')} {s.get('status')}: stages {stages}, metrics {differing}"
            )
    raise AssertionError("the replay diverged:\n" + "\n".join(lines)[:4000])
