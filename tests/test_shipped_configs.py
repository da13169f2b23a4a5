# SPDX-License-Identifier: Apache-2.0
"""Every YAML shipped in the package (areal_debug/configs/) loads into
DebugPPOConfig and says how to run it."""

import glob
import os

import pytest

import areal_debug
from areal_debug import DebugPPOConfig, load_expr_config

CONFIG_DIR = os.path.join(os.path.dirname(areal_debug.__file__), "configs")
CONFIGS = sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml")))


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


def test_testing_names_the_shipped_files():
    from areal_debug import testing

    assert [str(p) for p in testing.shipped_configs()] == CONFIGS
    assert str(testing.SPMD_CONFIG) in CONFIGS
    assert str(testing.SINGLE_CONTROLLER_CONFIG) in CONFIGS
    assert testing.EXAMPLE_SCRIPT.is_file()
    assert testing.EXAMPLE_SCRIPT.parent.parent == testing.CONFIG_DIR.parent
