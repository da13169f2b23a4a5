# SPDX-License-Identifier: Apache-2.0
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory):
    """The tiny offline model and arithmetic dataset, built once per session."""
    from areal_debug.tooling.tiny_task import build_tiny_model, write_dataset

    root = tmp_path_factory.mktemp("assets")
    build_tiny_model(str(root / "model"))
    write_dataset(str(root / "data.jsonl"), n=64)
    return root


@pytest.fixture
def workdir(tiny_assets, tmp_path):
    """A run directory with links to the tiny model and dataset."""
    os.symlink(tiny_assets / "model", tmp_path / "model")
    os.symlink(tiny_assets / "data.jsonl", tmp_path / "data.jsonl")
    return tmp_path


# The recordings the process-level tests replay from, recorded once per test run.
from support.recordings import (  # noqa: E402, F401
    cpu_server,
    sc_d2,
    sc_workdir,
    spmd_d1,
    spmd_d1_replay,
    spmd_d2,
)
from support.scripts import gsm8k_workdir  # noqa: E402, F401

# `make test` runs on two pytest-xdist workers (-n 2 --dist loadgroup): most of a
# test's time is one process starting up or waiting, so two at once use the two
# cores. Tests sharing a session recording share a worker (each worker records
# its own), each module stays on one worker (its module-scoped runs happen once),
# and every run that starts AReaL's scheduler (single-controller mode, Ray) is on
# the same worker: AReaL picks its workers' ports with the `random` module its
# seeding has seeded, so two such runs with the same seed at once pick the same
# ports (EADDRINUSE). SPMD runs get ports from the OS.
SCHEDULER = "areal-scheduler"
SCHEDULER_FIXTURES = {"sc_d2", "sc_workdir", "cpu_server", "gsm8k_workdir"}
SCHEDULER_MODULES = {
    "test_single_controller",
    "test_example_scripts",
    "test_agent_workflows",
    "test_ray_scheduler",
    "test_areal2_examples",
}
SPMD_FIXTURES = {"spmd_d1", "spmd_d2", "spmd_d1_replay"}
# Modules that reach the SPMD recordings through request.getfixturevalue too.
SPMD_MODULES = {"test_areal_spmd", "test_reproduce"}


def xdist_group_of(item) -> str:
    module = item.module.__name__
    names = set(item.fixturenames)
    if (
        names & SCHEDULER_FIXTURES
        or module in SCHEDULER_MODULES
        or "single-controller" in item.nodeid
    ):
        return SCHEDULER
    if names & SPMD_FIXTURES or module in SPMD_MODULES:
        return "spmd"
    return module


# First: pytest-xdist reads the marks in its own hook, to route each group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
