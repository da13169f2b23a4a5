# SPDX-License-Identifier: Apache-2.0
"""The one way a test gets a run directory: the tiny assets linked in, a fileroot.

A run directory holds ``model`` (a link to the session's tiny model),
``data.jsonl`` (the arithmetic dataset) or a local ``gsm8k`` dataset, and
``root/name_resolve`` (the fileroot AReaL's launchers check exists).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> Path:
    """The tiny offline model and arithmetic dataset, built once per session."""
    from areal_debug.tooling.tiny_task import build_tiny_model, write_dataset

    root = tmp_path_factory.mktemp("assets")
    build_tiny_model(str(root / "model"))
    write_dataset(str(root / "data.jsonl"), n=64)
    return root


def make_workdir(
    d: Path, assets: Path, model: bool = True, data: str = "arithmetic"
) -> Path:
    """Fill ``d`` as a run directory: the model unless ``model`` is False (the
    caller builds its own), ``data`` "arithmetic", "gsm8k" or "none"."""
    from support.scripts import write_gsm8k

    d = Path(d)
    if model:
        os.symlink(assets / "model", d / "model")
    if data == "arithmetic":
        os.symlink(assets / "data.jsonl", d / "data.jsonl")
    elif data == "gsm8k":
        write_gsm8k(d)
    elif data != "none":
        raise ValueError(f"data={data!r}: use 'arithmetic', 'gsm8k' or 'none'")
    os.makedirs(d / "root" / "name_resolve", exist_ok=True)
    return d


@pytest.fixture
def workdir(tiny_assets, tmp_path) -> Path:
    """A run directory of this test's own, with the arithmetic dataset."""
    return make_workdir(tmp_path, tiny_assets)
