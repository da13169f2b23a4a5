# SPDX-License-Identifier: Apache-2.0
"""Running the AReaL-shaped scripts in ``tests/scripts`` as a user would.

One work directory per test run holds the tiny model, a local gsm8k-format
dataset and the fileroot; each script's recordings live under their own
experiment name. Every process a run starts inherits ``AREAL_DEBUG_WORKDIR``,
which is how a test finds what was left behind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from areal_debug.single_controller.server_attach import TEACHER_ADDRS_ENV
from support.harness import TESTS, run_logged

SCRIPTS = os.path.join(TESTS, "scripts")
# AReaL 2.0.0's own example scripts at their repository paths (``examples.*``
# imports itself by that name), with the CPU YAMLs under ``cpu/``.
AREAL2_SCRIPTS = os.path.join(SCRIPTS, "areal2")


def script_path(name: str) -> str:
    return os.path.join(SCRIPTS, name)


def write_gsm8k(root: Path, n_train: int = 32, n_test: int = 8) -> Path:
    """A local dataset AReaL loads as gsm8k: a ``gsm8k`` folder with config ``main``."""
    d = root / "gsm8k"
    (d / "main").mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        with open(d / "main" / f"{split}.jsonl", "w") as f:
            for i in range(n):
                a, b = i % 7, (3 * i) % 5
                row = {
                    "question": f"what is {a} + {b} ?",
                    "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
                }
                f.write(json.dumps(row) + "\n")
    (d / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train.jsonl\n"
        "  - split: test\n    path: main/test.jsonl\n---\n"
    )
    return d


@pytest.fixture(scope="session")
def gsm8k_workdir(tmp_path_factory, tiny_assets) -> Path:
    from support.workdirs import make_workdir

    return make_workdir(tmp_path_factory.mktemp("gsm8k"), tiny_assets, data="gsm8k")


@pytest.fixture(scope="session")
def agent_workdir(tmp_path_factory, tiny_assets) -> Path:
    """The agent workflows' own: their runs go on beside the example scripts'
    (another xdist group), so neither may see the other's processes."""
    from support.workdirs import make_workdir

    return make_workdir(tmp_path_factory.mktemp("agent"), tiny_assets, data="gsm8k")


# The seed every script run is given: apart from the shipped example's (1), so
# that script runs and example runs may start AReaL's scheduler at the same time
# (tests/conftest.py groups the tests by it).
SCRIPTS_SEED = 2
# The agent workflows' runs have a seed of their own, so a group (and a worker) of
# their own: they take as long as the example scripts', and behind them on one
# worker the two were the suite's longest chain.
AGENT_SEED = 4
# The single-controller interrupted demo (tests/test_demo.py) starts AReaL's
# scheduler too: with a seed of its own it runs beside the suite's other
# scheduler runs, not behind them on one worker (three minutes).
LOSSLESS_SEED = 6
# The Ray scheduler's runs (tests/test_ray_scheduler.py): beside the seed-1 group,
# which records the suite's single-controller demo, not behind it.
RAY_SEED = 7

# The flags a script's dump and replay runs add, deterministic as the tests compare bits.
DUMP = ["debug.dump_rollout_data=true", "debug.deterministic=true"]
REPLAY = ["debug.replay_rollout_data=true", "debug.deterministic=true"]


def env_for(
    workdir: Path, server_addr: str | None = None, teacher_addr: str | None = None
) -> dict:
    env = {
        **os.environ,
        "AREAL_DEBUG_WORKDIR": str(workdir),
        "OMP_NUM_THREADS": "1",
        "HF_DATASETS_OFFLINE": "1",
        # AReaL's proxy imports litellm, which otherwise fetches a price list.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # Agent classes live in their own module, imported by AReaL's workers.
        "PYTHONPATH": os.pathsep.join(
            p for p in (SCRIPTS, AREAL2_SCRIPTS, os.environ.get("PYTHONPATH")) if p
        ),
    }
    for key in ("AREAL_LLM_SERVER_ADDRS", TEACHER_ADDRS_ENV, "AREAL_SPMD_MODE"):
        env.pop(key, None)
    if server_addr is not None:
        env["AREAL_LLM_SERVER_ADDRS"] = server_addr
        env["AREAL_DEBUG_CPU_SERVER"] = "1"
    if teacher_addr is not None:
        env[TEACHER_ADDRS_ENV] = teacher_addr
    return env


def processes_of(workdir: Path) -> list[str]:
    """Live processes started for ``workdir`` (RPC, data-service, server...):
    they all inherit its AREAL_DEBUG_WORKDIR."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.environ().get("AREAL_DEBUG_WORKDIR") != str(workdir):
                continue
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(" ".join(proc.info["cmdline"] or []))
    return found


def run_script(
    workdir: Path,
    script: str,
    config: str,
    name: str,
    overrides: list[str],
    server: str | None = None,
    teacher: str | None = None,
    seed: int = SCRIPTS_SEED,
) -> tuple[int, str]:
    """Run ``tests/scripts/<script>`` with ``--config tests/scripts/<config>``
    and AReaL's ``seed`` (the test's ``scheduler`` mark's); the run's own
    processes must all be gone when it returns."""
    cmd = [
        sys.executable,
        script_path(script),
        "--config",
        script_path(config),
        f"seed={seed}",
    ]
    rc, log = run_logged(
        [*cmd, *overrides], str(workdir), name, env_for(workdir, server, teacher), 900
    )
    # The CPU server of a dump is the test's own, ended by it.
    left = [p for p in processes_of(workdir) if "tooling.cpu_server" not in p]
    assert left == [], f"{name} left processes behind"
    return rc, log
