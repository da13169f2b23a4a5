# SPDX-License-Identifier: Apache-2.0
"""The suite's processes run with a garbage collector tuned for its speed
(tests/site/sitecustomize.py), except those of a test marked ``production_gc``
(tests/conftest.py): they run with Python's own, as in production."""

import gc
import json
import os
import subprocess
import sys

import pytest

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")

# What a process reports of its collector: its thresholds, and where the
# sitecustomize it loaded (if any: a system Python may have its own) comes from.
PROBE = (
    "import gc, json, sys; "
    "m = sys.modules.get('sitecustomize'); "
    "print(json.dumps([gc.get_threshold(), getattr(m, '__file__', None)]))"
)


def probe(*flags: str) -> tuple[tuple[int, ...], str | None]:
    out = subprocess.run(
        [sys.executable, *flags, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    threshold, sitecustomize = json.loads(out)
    return tuple(threshold), sitecustomize


def full_collect_is_pythons() -> bool:
    return type(gc.collect).__name__ == "builtin_function_or_method"


def from_the_suite(sitecustomize: str | None) -> bool:
    return sitecustomize is not None and os.path.dirname(sitecustomize) == SITE


def interpreter_default() -> tuple[int, ...]:
    # -I: no PYTHONPATH, so not the suite's sitecustomize.
    threshold, sitecustomize = probe("-I")
    assert not from_the_suite(sitecustomize)
    return threshold


@pytest.mark.production_gc
def test_a_production_gc_test_starts_its_processes_with_pythons_own_collector():
    threshold, sitecustomize = probe()
    assert threshold == interpreter_default()
    # Nor the freeze at exit.
    assert not from_the_suite(sitecustomize), sitecustomize
    # This process too, while the test runs (a pytest-xdist worker loads it),
    # an explicit collection included.
    assert gc.get_threshold() == interpreter_default()
    assert full_collect_is_pythons()


def test_other_tests_start_their_processes_with_the_suites_collector():
    threshold, sitecustomize = probe()
    assert from_the_suite(sitecustomize), sitecustomize
    assert threshold != interpreter_default()
