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
# cores. Each worker has its own session fixtures, so the tests of one recording
# share a worker (it is recorded once), and each module stays on one worker (its
# module-scoped runs, e.g. a dump, happen once).
RECORDING_GROUPS = {
    "spmd_d1": "spmd",
    "spmd_d2": "spmd",
    "spmd_d1_replay": "spmd",
    "sc_d2": "single-controller",
    "cpu_server": "single-controller",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        groups = {
            RECORDING_GROUPS[f] for f in item.fixturenames if f in RECORDING_GROUPS
        }
        # A test reading both kinds goes with the SPMD ones (the costlier pair).
        group = "spmd" if "spmd" in groups else next(iter(groups), item.module.__name__)
        item.add_marker(pytest.mark.xdist_group(group))
