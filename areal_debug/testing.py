# SPDX-License-Identifier: Apache-2.0
"""The shipped example, its configs and the CPU server, as commands and paths.

For areal-debug's own tests, for ``areal-debug demo`` and for users writing
tests of their own: everything here points into the installed package
(``areal_debug/examples``, ``areal_debug/configs``), never at a source
checkout, so it works from a wheel as well as from a checkout.

This module imports neither torch nor AReaL: the commands it builds run them
in processes of their own.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: The installed ``areal_debug`` package directory.
PACKAGE_DIR = Path(__file__).resolve().parent
#: Shipped configs (package data).
CONFIG_DIR = PACKAGE_DIR / "configs"
#: The shipped AReaL entry script (package data, run as a file, not imported).
EXAMPLE_SCRIPT = PACKAGE_DIR / "examples" / "rlvr_debug.py"
#: The tiny CPU run in SPMD mode (torchrun or a launcher).
SPMD_CONFIG = CONFIG_DIR / "tiny_cpu.yaml"
#: The same run in AReaL's single-controller mode (``scheduler.type: local``).
SINGLE_CONTROLLER_CONFIG = CONFIG_DIR / "tiny_cpu_sc.yaml"
#: ``python -m`` module of the CPU inference server.
SERVER_MODULE = "areal_debug.tooling.cpu_server"


class ServerError(RuntimeError):
    """The CPU server exited or did not become healthy."""


def shipped_configs() -> list[Path]:
    """Every YAML shipped in ``areal_debug/configs``, sorted."""
    return sorted(CONFIG_DIR.glob("*.yaml"))


def example_config(sc: bool = False) -> Path:
    """The shipped config of the example: single-controller (``sc``) or SPMD."""
    return SINGLE_CONTROLLER_CONFIG if sc else SPMD_CONFIG


_INTERPOLATION = re.compile(r"(\\*)\$\{")


def config_literal(value: str) -> str:
    """``value`` as a YAML string that OmegaConf (and so AReaL's config loading)
    reads back unchanged: every ``${`` escaped, so recorded text never becomes an
    interpolation (``${oc.env:...}`` and the like). Backslashes right before one
    are doubled, as OmegaConf's grammar reads them there."""
    return _INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", value)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_command(mode: str = "dump", nproc: int = 1, sc: bool = False) -> list[str]:
    """How the example is started; the script and its arguments follow.

    SPMD: a dump (and any run but a ``"replay"``) runs under torchrun with a
    free ``--master-port``; a ``"replay"`` goes through areal-debug's launcher,
    which starts no inference server (and picks its own master port).
    Single-controller (``sc``): the script itself is the controller, a plain
    Python process.
    """
    if sc:
        return [sys.executable]
    if mode == "replay":
        return [sys.executable, "-m", "areal_debug.launcher.local"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--master-port={free_port()}",
    ]


def example_command(
    mode: str = "dump", nproc: int = 1, sc: bool = False, overrides=()
) -> list[str]:
    """The full command line of the shipped example with its shipped config."""
    return [
        *launch_command(mode, nproc, sc),
        str(EXAMPLE_SCRIPT),
        "--config",
        str(example_config(sc)),
        *overrides,
    ]


def run_env(workdir, sc: bool = False, server_addr: str | None = None) -> dict:
    """The example's environment in either mode, everything under ``workdir``
    (the shipped configs read ``AREAL_DEBUG_WORKDIR``). With ``server_addr``
    the CPU server at that address stands in for SGLang."""
    env = {
        **os.environ,
        "AREAL_DEBUG_WORKDIR": str(workdir),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("AREAL_LLM_SERVER_ADDRS", None)
    env.pop("AREAL_SPMD_MODE", None)
    if not sc:
        env["AREAL_SPMD_MODE"] = "1"
    if server_addr is not None:
        env["AREAL_LLM_SERVER_ADDRS"] = server_addr
        env["AREAL_DEBUG_CPU_SERVER"] = "1"
    return env


def end_process(proc: subprocess.Popen) -> None:
    """End a process started in its own session, and everything in that session:
    SIGTERM, up to 15 s, then SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def kill_run(proc: subprocess.Popen) -> None:
    """SIGKILL a run and every process it started, as a crashed node ends them
    all. Killing the process group of ``proc`` is not enough: torchrun starts
    each trainer in a session of its own, which would go on training (and
    talking to the inference server) beside the run that resumes."""
    family = [proc.pid, *descendants(proc.pid)]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid``, read from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (comm) state ppid ...": comm may hold spaces and ")".
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tail(path: Path, n: int = 30) -> str:
    """The last ``n`` lines of a log file ("" if there is none)."""
    path = Path(path)
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-n:])


def start_server(
    workdir,
    env: dict,
    timeout: float = 180,
    name: str = "server",
    logprob_fault: str | None = None,
    slow_rollouts: float = 0.0,
) -> tuple[subprocess.Popen, str]:
    """Start the CPU server on ``workdir/model`` in its own session and wait
    until it is healthy; returns the process and its ``host:port``.
    ``logprob_fault`` is its ``--logprob-fault`` (``tooling/logprob_fault.py``),
    ``slow_rollouts`` its ``--slow-rollouts``.

    It logs to ``workdir/<name>.log``; end it with :func:`end_process`. Raises
    :class:`ServerError` (after ending it) if it exits or is not healthy within
    ``timeout`` seconds.
    """
    workdir = Path(workdir)
    log_path = workdir / f"{name}.log"
    addr_file = workdir / f"{name}.addr"
    addr_file.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "--model-path",
        str(workdir / "model"),
        "--addr-file",
        str(addr_file),
        *([f"--logprob-fault={logprob_fault}"] if logprob_fault else []),
        *([f"--slow-rollouts={slow_rollouts:g}"] if slow_rollouts else []),
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            end_process(proc)
            raise ServerError(
                f"the CPU server exited ({proc.returncode}):\n{tail(log_path)}"
            )
        if addr_file.exists():
            addr = addr_file.read_text().strip()
            try:
                with urllib.request.urlopen(f"http://{addr}/health", timeout=5):
                    return proc, addr
            except OSError:
                pass
        time.sleep(0.5)
    end_process(proc)
    raise ServerError(f"the CPU server did not become healthy within {timeout:g} s")
