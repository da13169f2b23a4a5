# SPDX-License-Identifier: Apache-2.0
import gc
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


# What a browser test uses (support.browser.needs_browser): the headless browser.
from support.browser import headless_browser  # noqa: E402, F401

# The tiny assets and the run directories every process-level test runs in.
# The recordings the process-level tests replay from, recorded once per test run.
from support.recordings import (  # noqa: E402, F401
    bisect_d1,
    cpu_server,
    sc_d2,
    sc_workdir,
    spmd_d1,
    spmd_d1_replay,
    spmd_d2,
)

# `make test` runs on two pytest-xdist workers (-n 2 --dist loadgroup): most of a
# test's time is one process starting up or waiting, so two at once use the two
# cores. Tests sharing a session recording share a worker (each worker records
# its own) and each module stays on one worker (its module-scoped runs happen once).
#
# Runs that start AReaL's scheduler (single-controller mode, Ray) are marked
# `scheduler(seed=N)`: AReaL picks its workers' ports with the `random` module its
# seeding has seeded with the config's seed, so two such runs with the same seed at
# once pick the same ports (EADDRINUSE). One group per seed keeps those apart while
# the AReaL scripts (seed SCRIPTS_SEED), the agent workflows (AGENT_SEED) and the
# shipped example (seed 1) run side by side. SPMD runs get ports from the OS.
from support.scripts import (  # noqa: E402
    AGENT_SEED,
    LOSSLESS_SEED,
    RAY_SEED,
    SCRIPTS_SEED,
    agent_workdir,  # noqa: F401
    gsm8k_workdir,  # noqa: F401
)
from support.workdirs import tiny_assets, workdir  # noqa: E402, F401

# Every process a test starts skips Python's final garbage collections (see
# tests/site/sitecustomize.py): it inherits this PYTHONPATH. Not those of a test
# marked production_gc (the fixture below).
_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_SITE, os.environ.get("PYTHONPATH")) if p
)


def _without_test_site(pythonpath: str) -> list[str]:
    return [
        p for p in pythonpath.split(os.pathsep) if p and os.path.abspath(p) != _SITE
    ]


def _suite_gc_here():
    """tests/site/sitecustomize.py where this process loaded it (a pytest-xdist
    worker inherits the PYTHONPATH above), else None."""
    module = sys.modules.get("sitecustomize")
    file = getattr(module, "__file__", None)
    return module if file and os.path.dirname(os.path.abspath(file)) == _SITE else None


@pytest.fixture(autouse=True)
def production_gc_when_marked(request, monkeypatch):
    """A test marked production_gc (signals, crashes, process hygiene: how
    processes end) runs with Python's own garbage collector: every process it
    starts does without tests/site on PYTHONPATH, and this process uses the
    interpreter's thresholds while it runs."""
    if request.node.get_closest_marker("production_gc") is None:
        return
    kept = _without_test_site(os.environ.get("PYTHONPATH", ""))
    if kept:
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(kept))
    else:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    suite_gc = _suite_gc_here()
    if suite_gc is not None:
        raised = gc.get_threshold()
        gc.set_threshold(*suite_gc.DEFAULT_THRESHOLD)
        request.addfinalizer(lambda: gc.set_threshold(*raised))
        monkeypatch.setattr(gc, "collect", suite_gc.FULL_COLLECT)


# The session recordings, by the group whose worker records them.
FIXTURE_GROUPS = {
    "sc_workdir": "scheduler-seed1",
    "cpu_server": "scheduler-seed1",
    "sc_d2": "scheduler-seed1",
    "gsm8k_workdir": f"scheduler-seed{SCRIPTS_SEED}",
    "agent_workdir": f"scheduler-seed{AGENT_SEED}",
    # Each SPMD recording has a group of its own: the tests replaying spmd_d1
    # alone are the suite's longest chain, and spmd_d2's need not wait behind it.
    "spmd_d1": "spmd-d1",
    "spmd_d2": "spmd-d2",
    "spmd_d1_replay": "spmd-d1",
    # The two bisects replay one dump: on one worker, behind each other.
    "bisect_d1": "bisect-d1",
}


# The seeds whose scheduler runs have a group (and so a worker) of their own.
SCHEDULER_SEEDS = {
    1,
    SCRIPTS_SEED,
    AGENT_SEED,
    LOSSLESS_SEED,
    RAY_SEED,
}


def xdist_group_of(item) -> str:
    groups = {FIXTURE_GROUPS[f] for f in item.fixturenames if f in FIXTURE_GROUPS}
    if item.get_closest_marker("spmd_recordings") is not None and not groups:
        raise pytest.UsageError(
            f"{item.nodeid} is marked spmd_recordings but uses none of "
            f"{sorted(f for f in FIXTURE_GROUPS if f.startswith('spmd'))}"
        )
    if len(groups) > 1:
        raise pytest.UsageError(
            f"{item.nodeid} needs the session fixtures of xdist groups "
            f"{sorted(groups)}; each worker would record them again"
        )
    mark = item.get_closest_marker("scheduler")
    if mark is None:
        if not groups and item.get_closest_marker("apart") is not None:
            return f"apart-{item.name}"
        return groups.pop() if groups else item.module.__name__
    seed = mark.kwargs.get("seed", 1)
    own = f"scheduler-seed{seed}"
    if groups and own not in groups:
        # A scheduler run on another group's worker, beside any scheduler run:
        # only a seed no scheduler group uses keeps its ports apart.
        if seed in SCHEDULER_SEEDS:
            raise pytest.UsageError(
                f"{item.nodeid} starts AReaL's scheduler with seed {seed} in group "
                f"{groups.pop()}: give it a seed outside {sorted(SCHEDULER_SEEDS)}"
            )
        return groups.pop()
    return own


# First: pytest-xdist reads the marks in its own hook, to route each group.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its xdist group, and put the groups that run AReaL
    most first: pytest-xdist hands groups out in collection order (`make test`
    passes --no-loadscope-reorder), so the long ones start at once and the
    short ones fill in around them."""
    weight: dict[str, int] = {}
    for item in items:
        group = xdist_group_of(item)
        item.add_marker(pytest.mark.xdist_group(group))
        heavy = item.get_closest_marker("areal") is not None
        weight[group] = weight.get(group, 0) + heavy
    order = {group: i for i, group in enumerate(weight)}

    def rank(item) -> tuple[int, int]:
        group = item.get_closest_marker("xdist_group").args[0]
        return -weight[group], order[group]

    items.sort(key=rank)
