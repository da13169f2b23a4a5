# SPDX-License-Identifier: Apache-2.0
"""A missing system part skips a test locally and fails it in CI."""

import pytest
from support.system_parts import missing_system_part

WHY = "mkfs.xfs is not installed (xfsprogs)"


def test_a_missing_system_part_skips_the_test_outside_ci(monkeypatch):
    for unset in (None, "", "false", "1"):  # only CI=true is CI
        if unset is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", unset)
        with pytest.raises(pytest.skip.Exception) as e:
            missing_system_part(WHY)
        assert str(e.value) == WHY


def test_a_missing_system_part_fails_the_test_in_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as e:
        missing_system_part(WHY)
    assert WHY in str(e.value) and ".ci/run installs them" in str(e.value)
