# SPDX-License-Identifier: Apache-2.0
"""Every YAML in configs/ loads into DebugPPOConfig and says how to run it."""

import glob
import os

import pytest
from support.harness import REPO

from areal_debug import DebugPPOConfig, load_expr_config

CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))


def test_there_are_configs():
    assert {os.path.basename(c) for c in CONFIGS} >= {
        "tiny_cpu.yaml",
        "tiny_cpu_sc.yaml",
        "gsm8k_grpo_debug.yaml",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_loads_in_every_mode(path, tmp_path, monkeypatch):
    monkeypatch.setenv("AREAL_DEBUG_WORKDIR", str(tmp_path))
    root = f"cluster.fileroot={tmp_path}/root"
    for mode in (None, "dump_rollout_data", "replay_rollout_data"):
        argv = ["--config", path, root] + ([f"debug.{mode}=true"] if mode else [])
        cfg, _ = load_expr_config(argv, DebugPPOConfig)
        assert isinstance(cfg, DebugPPOConfig)
        assert cfg.debug.enabled == (mode is not None)


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_opens_with_its_commands(path):
    with open(path) as f:
        header = [line for line in f.read().splitlines() if line.startswith("#")]
    text = "\n".join(header)
    assert "debug.dump_rollout_data=true" in text
    assert "debug.replay_rollout_data=true" in text
