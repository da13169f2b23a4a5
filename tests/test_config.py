# SPDX-License-Identifier: Apache-2.0
"""The debug: section through AReaL's real config loading (load_expr_config)."""

import dataclasses
import glob
import os
import pickle
from dataclasses import dataclass, field

import pytest
import yaml
from areal.api.cli_args import GRPOConfig
from areal.api.cli_args import load_expr_config as areal_load_expr_config
from support.harness import FAKE_CONFIG

from areal_debug import DebugConfig, DebugGRPOConfig, DebugPPOConfig, load_expr_config
from areal_debug.config import DebugSection, debug_config_of


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


@pytest.mark.parametrize(
    "key,value",
    [
        ("max_pending_steps", 0),
        ("verify_rtol", -1.0),
        ("compression", "gzip"),
        ("compression_level", 0),
        ("compression_level", 23),
        ("compression_threads", -1),
        ("layer_digests", "often"),
    ],
)
def test_invalid_values_name_the_key(key, value):
    with pytest.raises(ValueError, match=f"debug.{key}"):
        DebugConfig(**{key: value})


def test_layer_digests_steps_and_words():
    """true, false, pinned (debug.pin_steps) or steps in the one grammar; YAML's
    true reaches the str field as "True"; it needs the stage digests."""
    assert DebugConfig(layer_digests="True").layer_digests_at(7)
    assert not DebugConfig(layer_digests="false").layer_digests_at(0)
    pinned = DebugConfig(pin_steps=[3])  # the default: pinned steps
    assert pinned.layer_digests_at(3) and not pinned.layer_digests_at(2)
    ranges = DebugConfig(layer_digests="0-2,9-")
    assert [s for s in range(12) if ranges.layer_digests_at(s)] == [0, 1, 2, 9, 10, 11]
    with pytest.raises(ValueError, match="debug.layer_digests='0'.*stage_digests"):
        DebugConfig(layer_digests="0", stage_digests=False)
    DebugConfig(stage_digests=False)  # the default needs nothing


@dataclass
class ScriptConfig(GRPOConfig):
    """Shaped like AReaL's example config subclasses (MultiTurnGRPOConfig...)."""

    export_style: str = field(default="concat", metadata={"help": "test field"})
    agent_run_args: dict = field(default_factory=dict)


@dataclass
class ScriptDebugConfig(DebugSection, ScriptConfig):
    """The mixin form, declared in the user's module."""


def _with_extra_fields(path: str) -> str:
    with open(path) as f:
        cfg = yaml.safe_load(f)
    cfg["export_style"] = "individual"
    cfg["agent_run_args"] = {"max_turns": 2}
    out = path.replace(".yaml", "_extra.yaml")
    with open(out, "w") as f:
        yaml.safe_dump(cfg, f)
    return out


def test_the_users_own_config_class_is_kept(yaml_without_debug):
    """AReaL's GRPOConfig or a script's subclass: no class of ours needed."""
    for cls in (GRPOConfig, ScriptConfig):
        argv = ["--config", yaml_without_debug, "debug.dump_rollout_data=true"]
        if cls is ScriptConfig:
            argv[1] = _with_extra_fields(yaml_without_debug)
        cfg, config_file = load_expr_config(argv, cls)
        assert type(cfg) is cls and config_file == argv[1]
        assert cfg.debug.dump_rollout_data and cfg.debug.path.endswith(
            os.path.join("tiny", "t0", "areal_debug_recording")
        )
        # What AReaL serialises (and sends to RPC workers) is the user's class.
        assert "debug" not in {f.name for f in dataclasses.fields(cfg)}
        assert "debug" not in dataclasses.asdict(cfg)
        assert pickle.loads(pickle.dumps(cfg)).debug.dump_rollout_data
    assert cfg.export_style == "individual" and cfg.agent_run_args == {"max_turns": 2}


def test_a_users_class_replays_under_its_own_trial(yaml_without_debug):
    argv = ["--config", _with_extra_fields(yaml_without_debug)]
    cfg, _ = load_expr_config([*argv, "debug.replay_rollout_data=true"], ScriptConfig)
    assert type(cfg) is ScriptConfig and cfg.trial_name == "t0_replay"
    assert cfg.actor.trial_name == "t0_replay" and cfg.export_style == "individual"
    # The config AReaL saves with the run's logs has the section it ran with.
    (saved,) = glob.glob(
        os.path.join(cfg.cluster.fileroot, "logs", "**", "t0_replay", "config.yaml"),
        recursive=True,
    )
    with open(saved) as f:
        assert yaml.safe_load(f)["debug"]["replay_rollout_data"] is True


def test_the_mixin_form_in_the_users_module(yaml_without_debug):
    argv = ["--config", _with_extra_fields(yaml_without_debug)]
    cfg, _ = load_expr_config(
        [*argv, "debug.dump_rollout_data=true"], ScriptDebugConfig
    )
    assert type(cfg) is ScriptDebugConfig and cfg.debug.dump_rollout_data
    assert cfg.export_style == "individual"
    assert debug_config_of(cfg) is cfg.debug
    # A config with no section at all reads as debug off.
    plain, _ = areal_load_expr_config(["--config", yaml_without_debug], GRPOConfig)
    assert not debug_config_of(plain).enabled


def test_determinism_differences_that_cannot_matter_on_a_cpu_are_not_reported():
    from areal_debug.determinism import differences

    recorded = {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "cudnn_benchmark": False,
        "torch_deterministic_algorithms": True,
    }
    replay = {
        "CUBLAS_WORKSPACE_CONFIG": None,
        "cudnn_benchmark": True,
        "torch_deterministic_algorithms": False,
    }
    assert differences(recorded, replay, on_gpu=False) == [
        "torch_deterministic_algorithms: recorded True, replay False"
    ]
    assert differences(recorded, replay, on_gpu=True) == [
        "CUBLAS_WORKSPACE_CONFIG: recorded ':4096:8', replay None",
        "cudnn_benchmark: recorded False, replay True",
        "torch_deterministic_algorithms: recorded True, replay False",
    ]


def test_an_unnamed_replay_never_takes_an_earlier_replays_trial(
    yaml_with_debug, tmp_path
):
    """<trial>_replay, then <trial>_replay2, ...: the first trial whose log
    directory holds no replay report (issue 39, point 4)."""
    import getpass

    from areal_debug.config import earlier_replays_note, replaced_report_note

    logs = tmp_path / "root" / "logs" / getpass.getuser() / "tiny"
    args = ["--config", yaml_with_debug, "debug.replay_rollout_data=true"]
    names = []
    for _ in range(3):
        cfg, _ = load_expr_config(args)
        names.append(cfg.trial_name)
        # AReaL's own files there (config.yaml...) do not take the trial: a report does.
        assert cfg.debug.replay_trial_name == cfg.trial_name
        (logs / cfg.trial_name).mkdir(parents=True, exist_ok=True)
        (logs / cfg.trial_name / "replay_report.json").write_text("{}")
    assert names == ["t0_replay", "t0_replay2", "t0_replay3"]
    # A named replay runs where it is told, report or not.
    cfg, _ = load_expr_config([*args, "debug.replay_trial_name=t0_replay"])
    assert cfg.trial_name == "t0_replay"
    assert earlier_replays_note("t0", "t0_replay") is None
    assert earlier_replays_note("t0", "mine") is None
    note = earlier_replays_note("t0", "t0_replay3")
    assert "runs as trial t0_replay3" in note and "(t0_replay, t0_replay2)" in note
    note = replaced_report_note("t0_replay", "/logs/t0_replay/replay_report.json")
    assert "replaces the earlier replay's report" in note
    assert "debug.replay_trial_name=t0_replay" in note
