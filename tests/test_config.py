# SPDX-License-Identifier: Apache-2.0
"""The debug: section through AReaL's real config loading (load_expr_config)."""

import os

import pytest
import yaml
from areal.api.cli_args import load_expr_config as areal_load_expr_config
from support.harness import FAKE_CONFIG

from areal_debug import DebugConfig, DebugGRPOConfig, DebugPPOConfig, load_expr_config


@pytest.fixture
def yaml_without_debug(tmp_path):
    with open(FAKE_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg.pop("debug")
    cfg["cluster"]["fileroot"] = str(tmp_path / "root")
    p = tmp_path / "no_debug.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


@pytest.fixture
def yaml_with_debug(tmp_path):
    with open(FAKE_CONFIG) as f:
        cfg = yaml.safe_load(f)
    cfg["debug"] = {
        "dump_rollout_data": False,
        "replay_rollout_data": False,
        "path": None,
    }
    cfg["cluster"]["fileroot"] = str(tmp_path / "root")
    p = tmp_path / "with_debug.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def test_defaults_are_off():
    d = DebugConfig()
    assert not d.dump_rollout_data and not d.replay_rollout_data and d.path is None
    assert not d.enabled


def test_areal_loader_reads_debug_section_and_cli(yaml_with_debug, tmp_path):
    cfg, _ = areal_load_expr_config(
        ["--config", yaml_with_debug, "debug.replay_rollout_data=true"], DebugPPOConfig
    )
    assert isinstance(cfg, DebugPPOConfig) and cfg.debug.replay_rollout_data
    assert cfg.debug.path == os.path.join(
        str(tmp_path / "root"), "tiny", "t0", "areal_debug_recording"
    )


def test_cli_override_works_without_a_debug_section(yaml_without_debug, tmp_path):
    cfg, _ = load_expr_config(
        ["train.py", "--config", yaml_without_debug, "debug.dump_rollout_data=true"]
    )
    assert cfg.debug.dump_rollout_data and cfg.trial_name == "t0"
    cfg, _ = load_expr_config(["--config", yaml_without_debug], DebugGRPOConfig)
    assert isinstance(cfg, DebugGRPOConfig) and not cfg.debug.enabled


def test_cli_sets_keys_a_partial_debug_section_lacks(yaml_with_debug):
    cfg, _ = load_expr_config(
        [
            "--config",
            yaml_with_debug,
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=again",
            "debug.verify_atol=0.5",
        ]
    )
    assert cfg.debug.replay_rollout_data and cfg.trial_name == "again"
    assert cfg.debug.verify_atol == 0.5


def test_both_flags_is_an_error_naming_both_keys(yaml_with_debug):
    with pytest.raises(Exception) as e:
        areal_load_expr_config(
            [
                "--config",
                yaml_with_debug,
                "debug.replay_rollout_data=true",
                "debug.dump_rollout_data=true",
            ],
            DebugPPOConfig,
        )
    msg = str(e.value)
    assert (
        "debug.dump_rollout_data=true" in msg
        and "debug.replay_rollout_data=true" in msg
    )
    assert "cannot be combined" in msg


def test_replay_runs_under_its_own_trial(yaml_without_debug):
    cfg, _ = load_expr_config(
        ["--config", yaml_without_debug, "debug.replay_rollout_data=true"]
    )
    # The recording is found under the recorded trial...
    assert cfg.debug.path.endswith(os.path.join("tiny", "t0", "areal_debug_recording"))
    # ...while everything the replay writes goes under <trial>_replay.
    assert cfg.trial_name == "t0_replay"
    for sub in (
        cfg.stats_logger,
        cfg.saver,
        cfg.recover,
        cfg.evaluator,
        cfg.actor,
        cfg.rollout,
    ):
        assert sub.trial_name == "t0_replay", type(sub).__name__
    log_dir = os.path.join(cfg.cluster.fileroot, "logs")
    saved = [os.path.join(r, f) for r, _, fs in os.walk(log_dir) for f in fs]
    assert all("t0_replay" in p for p in saved), saved


def test_explicit_path_and_trial_name_are_kept(yaml_without_debug, tmp_path):
    cfg, _ = load_expr_config(
        [
            "--config",
            yaml_without_debug,
            "debug.replay_rollout_data=true",
            f"debug.path={tmp_path}/rec",
            "debug.replay_trial_name=mine",
        ]
    )
    assert cfg.debug.path == f"{tmp_path}/rec" and cfg.trial_name == "mine"


@pytest.mark.parametrize("key,value", [("max_pending_steps", 0), ("verify_rtol", -1.0)])
def test_invalid_values_name_the_key(key, value):
    with pytest.raises(ValueError, match=f"debug.{key}"):
        DebugConfig(**{key: value})
