# SPDX-License-Identifier: Apache-2.0
"""This areal-debug's version, as recordings and reports name it.

The installed distribution's; run from a source checkout that was never installed
(the checkout on ``PYTHONPATH``, as on a machine that can install nothing), the
checkout's ``pyproject.toml`` version marked ``+source``: the metadata lookup alone
failed there, and a dump run died writing its manifest.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "areal-debug"
_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def areal_debug_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return f"{source_version() or 'unknown'}+source"


def source_version() -> str | None:
    """``[project] version`` of the checkout this package is imported from."""
    import tomllib

    try:
        with open(_PYPROJECT, "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, ValueError):
        return None
