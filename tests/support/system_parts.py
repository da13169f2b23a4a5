# SPDX-License-Identifier: Apache-2.0
"""Tests that need a part of the system ``make test`` never installs (a headless
chromium, mkfs.xfs, root to mount a filesystem): skipped on a developer's
machine, saying what is missing; failed in CI (``CI=true``), where ``.ci/run``
installs them, so a test that silently stopped running cannot pass CI.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether this run is CI's (CI=true, as CI services set it)."""
    return os.environ.get("CI") == "true"


def missing_system_part(why: str) -> NoReturn:
    """End the running test for a missing system part, ``why`` saying which:
    skipped locally, failed in CI."""
    if in_ci():
        pytest.fail(
            f"{why}. In CI (CI=true) every system part the tests use must be "
            "there: .ci/run installs them as root (unset CI to skip instead).",
            pytrace=False,
        )
    pytest.skip(why)
