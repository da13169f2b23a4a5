# SPDX-License-Identifier: Apache-2.0
"""areal_debug.launcher.local: allocation rewriting, the CPU fixes, and real runs."""

import math
import sys

import pytest
from omegaconf import OmegaConf
from support.harness import (
    FAKE_CONFIG,
    FAKE_SCRIPT,
    assert_whole_batch_statistics_kept,
    replay_report,
    run_launcher,
    run_logged,
)
from support.recordings import SPMD_D1_STEPS

from areal_debug.allocation import AllocationError, plan_allocation
from areal_debug.launcher.common import plan_launch
from areal_debug.launcher.local import CpuSafeLocalLauncher


@pytest.mark.parametrize(
    "alloc,expected",
    [
        ("sglang:d4p1t1+fsdp:d4p1t1", "fsdp:d4p1t1"),
        ("vllm:d2t1+fsdp:d2", "fsdp:d2"),
        ("sglang[rollout]:d2+fsdp[actor]:d4", "fsdp[actor]:d4"),
        ("sglang[r]:d2|fsdp[a]:d2", "fsdp[a]:d2"),
        ("sglang:d2+megatron:d2p2t1", "megatron:d2p2t1"),
        ("vllm:d2+archon:d2", "archon:d2"),
        ("fsdp:d4", "fsdp:d4"),
    ],
)
def test_training_part_of_every_allocation_form(alloc, expected):
    plan = replay_plan(alloc)
    assert (plan.allocation, plan.train) == (expected, expected)
    assert plan.notes[-1] == (
        f"Replay: allocation_mode {alloc!r} -> {expected!r}; no inference server "
        "is started."
    )
    assert plan.dropped == (
        () if alloc == expected else tuple(alloc.replace("|", "+").split("+")[:1])
    )


def replay_plan(alloc, actor_backend=None):
    """The plan of a replay of ``alloc`` (a config with only the actor)."""
    cfg = {"allocation_mode": alloc, "actor": {"backend": actor_backend}}
    return plan_allocation(OmegaConf.create(cfg), [], "replay")


@pytest.mark.each_areal
def test_a_named_hybrid_moe_allocation_replays_its_training_part_where_areal_reads_it():
    """megatron[name]:(attn:...|ffn:...) (alloc_mode.py's train_backend_name_hybrid,
    AReaL main): the replay keeps the whole hybrid part, whose '|' is not a
    colocation. An AReaL whose grammar lacks it (1.0.4, 2.0.0) is named refusing it."""
    from areal.api import alloc_mode

    alloc = "sglang:d2+megatron[actor]:(attn:d1p2t2|ffn:d1p2e2)"
    if "train_backend_name_hybrid" not in alloc_mode.ALLOCATION_GRAMMAR:
        with pytest.raises(AllocationError, match="not an allocation AReaL accepts"):
            replay_plan(alloc)
        return
    plan = replay_plan(alloc)
    assert plan.allocation == plan.train == "megatron[actor]:(attn:d1p2t2|ffn:d1p2e2)"
    assert (plan.train_world_size, plan.train_dp_size) == (4, 1)
    assert plan.dropped == ("sglang:d2",)


def test_legacy_bare_allocation_is_read_as_training_with_a_note():
    plan = replay_plan("d4p1t1")
    assert plan.allocation == "fsdp:d4p1t1"
    assert "read as the training allocation fsdp:d4p1t1" in plan.notes[0]
    assert replay_plan("d2p2t1", "megatron:d2p2t1").allocation == "megatron:d2p2t1"


@pytest.mark.parametrize(
    "alloc,message",
    [
        ("sglang:d4", "has no training part"),
        ("vllm:d2t2", "has no training part"),
        ("", "allocation_mode is empty"),
        ("fsdp:d2p2", "not an allocation AReaL accepts"),
        ("sglang.d4+fsdp.d4", "not an allocation AReaL accepts"),
    ],
)
def test_unusable_allocations_say_what_to_do(alloc, message):
    with pytest.raises(AllocationError) as e:
        replay_plan(alloc)
    assert message in str(e.value) and "allocation_mode=" in str(e.value)


def argv(*overrides):
    return [FAKE_SCRIPT, "--config", FAKE_CONFIG, *overrides]


def test_a_replay_with_recover_on_is_launched_once():
    # AReaL's launchers re-run an ended job while recover is on (up to
    # recover.retries more times): the launcher's config says disabled.
    replay = plan_launch(argv("debug.replay_rollout_data=true", "recover.mode=on"))
    assert replay.config.recover.mode == "disabled"
    assert any("recover.mode=on is not passed" in n for n in replay.notes)
    assert "recover.mode=on" in replay.argv  # the trainers' own line is unchanged
    dump = plan_launch(argv("debug.dump_rollout_data=true", "recover.mode=on"))
    assert dump.config.recover.mode == "on"


def test_an_unnamed_replay_is_launched_under_a_trial_of_its_own(tmp_path):
    """The launcher's log goes where its trainers will run: the first
    <trial>_replay<N> without a report, said in a note."""
    import getpass

    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "manifest.json").write_text("{}")
    args = argv(
        f"cluster.fileroot={tmp_path}",
        f"debug.path={rec}",
        "debug.replay_rollout_data=true",
    )
    assert plan_launch(args).config.trial_name == "t0_replay"
    kept = tmp_path / "logs" / getpass.getuser() / "tiny" / "t0_replay"
    kept.mkdir(parents=True)
    (kept / "replay_report.json").write_text("{}")
    plan = plan_launch(args)
    assert plan.config.trial_name == "t0_replay2"
    assert any("runs as trial t0_replay2" in n for n in plan.notes)
    # The trainers choose alike: nothing is added to their command line.
    assert not any("replay_trial_name" in a for a in plan.argv)


def test_replay_plan_rewrites_allocation_for_the_trainers_too():
    plan = plan_launch(
        argv("debug.replay_rollout_data=true", "allocation_mode=sglang:d2+fsdp:d2")
    )
    assert plan.replay and plan.config.allocation_mode == "fsdp:d2"
    assert "++allocation_mode=fsdp:d2" in plan.argv
    assert "allocation_mode=sglang:d2+fsdp:d2" not in plan.argv
    # The launcher's own logs go to the replay trial, never the recorded run's.
    assert plan.config.trial_name == "t0_replay"
    assert any("no inference server is started" in n for n in plan.notes)


def test_dump_plan_leaves_argv_and_allocation_alone(monkeypatch):
    monkeypatch.delenv("AREAL_LLM_SERVER_ADDRS", raising=False)
    args = argv("debug.dump_rollout_data=true")
    plan = plan_launch(args)
    # Only the debug key the YAML lacks becomes hydra's add-or-override.
    assert not plan.replay and [a.lstrip("+") for a in plan.argv] == args
    assert plan.config.allocation_mode == "sglang:d1+fsdp:d1"
    assert plan.config.trial_name == "t0"


def test_empty_allocation_is_derived_from_the_engine_backends(monkeypatch):
    """AReaL 1.0.4's example YAMLs leave allocation_mode empty."""
    monkeypatch.delenv("AREAL_LLM_SERVER_ADDRS", raising=False)
    backends = [
        "++allocation_mode=",
        "rollout.backend=sglang:d2",
        "actor.backend=fsdp:d2",
    ]
    dump = plan_launch(argv("debug.dump_rollout_data=true", *backends))
    assert dump.config.allocation_mode == "sglang:d2+fsdp:d2"
    assert dump.argv[-1] == "++allocation_mode=sglang:d2+fsdp:d2"
    assert any("from rollout.backend and actor.backend" in n for n in dump.notes)
    replay = plan_launch(argv("debug.replay_rollout_data=true", *backends))
    assert replay.config.allocation_mode == "fsdp:d2"
    assert replay.argv.count("++allocation_mode=fsdp:d2") == 1
    assert not any(a.endswith("sglang:d2+fsdp:d2") for a in replay.argv)
    with pytest.raises(
        AllocationError, match=r"\+\+allocation_mode=sglang:d4\+fsdp:d4"
    ):
        plan_launch(argv("++allocation_mode=", "actor.backend=", "rollout.backend="))


def test_a_yaml_without_the_allocation_key_gets_one(monkeypatch, tmp_path):
    # AReaL 1.0.4's example YAMLs have no allocation_mode key at all, and the
    # launcher's composed config is a struct (found running the gsm8k script).
    from support.scripts import script_path

    monkeypatch.delenv("AREAL_LLM_SERVER_ADDRS", raising=False)
    monkeypatch.setenv("AREAL_DEBUG_WORKDIR", str(tmp_path))
    config = ["--config", script_path("gsm8k_grpo_cpu.yaml")]
    dump = plan_launch(
        [script_path("gsm8k_rl.py"), *config, "debug.dump_rollout_data=true"]
    )
    assert dump.config.allocation_mode == "sglang:d1p1t1+fsdp:d1p1t1"
    assert dump.argv[-1] == "++allocation_mode=sglang:d1p1t1+fsdp:d1p1t1"
    replay = plan_launch(
        [script_path("gsm8k_rl.py"), *config, "debug.replay_rollout_data=true"]
    )
    assert replay.config.allocation_mode == "fsdp:d1p1t1"


def test_running_servers_are_passed_on_and_none_started(monkeypatch):
    monkeypatch.setenv("AREAL_LLM_SERVER_ADDRS", "127.0.0.1:4567")
    plan = plan_launch(argv("debug.dump_rollout_data=true"))
    # The launcher parses only the training part, so it starts no server...
    assert plan.config.allocation_mode == "fsdp:d1"
    # ...and the trainer gets the addresses instead of AReaL's empty value.
    assert plan.extra_env["AREAL_LLM_SERVER_ADDRS"] == "127.0.0.1:4567"
    assert any("no server is started" in n for n in plan.notes)


# -- allocation_mode and the training engines' backends agree -----------------------


def engines_config(**backends):
    """A composed config's training engines (critic follows the actor's backend,
    as AReaL's gsm8k_ppo.yaml writes it); ``backends`` replace the YAML's."""
    cfg = {
        "allocation_mode": "sglang:d1+fsdp:d1",
        "actor": {"backend": "fsdp:d1"},
        "critic": {"backend": "${actor.backend}"},
        "ref": {"backend": "fsdp:d1"},
        "teacher": {"engine_type": "train", "train": {"backend": "fsdp:d1"}},
    }
    for key, value in backends.items():
        cfg[key]["backend"] = value
    return OmegaConf.create(cfg)


def agree_with_allocation(cfg, argv, allocation=None):
    """The plan of a run (``load_expr_config``'s) of ``cfg`` with ``allocation``."""
    if allocation is not None:
        cfg.allocation_mode = allocation
    return plan_allocation(cfg, argv, "run")


def test_a_given_allocation_rewrites_the_yaml_backends_in_one_note():
    cfg = engines_config()
    agreement = agree_with_allocation(
        cfg, ["--config", "x.yaml", "allocation_mode=fsdp:d2"], "fsdp:d2"
    )
    # The critic follows the actor by interpolation; the others are set.
    assert agreement.backends == {
        "actor.backend": "fsdp:d2",
        "ref.backend": "fsdp:d2",
        "teacher.train.backend": "fsdp:d2",
    }
    assert agreement.allocation == "fsdp:d2"
    (note,) = agreement.notes
    assert note == (
        "allocation_mode=fsdp:d2 (command line) sets the training engines' layout, "
        "replacing the YAML's: actor.backend fsdp:d1 -> fsdp:d2, ref.backend "
        "fsdp:d1 -> fsdp:d2, teacher.train.backend fsdp:d1 -> fsdp:d2."
    )
    assert cfg.actor.backend == "fsdp:d1"  # the caller's config is not changed
    # A teacher served for inference has no training side to set.
    cfg.teacher.engine_type = "rollout"
    assert (
        "teacher.train.backend"
        not in agree_with_allocation(cfg, [], "fsdp:d2").backends
    )


def test_nothing_to_do_when_backends_and_allocation_agree():
    # The same layout in another spelling agrees; so does no allocation at all.
    for alloc in ("sglang:d1+fsdp:d1", "fsdp:d1p1t1", "sglang:d4"):
        agreement = agree_with_allocation(engines_config(), [], alloc)
        assert (agreement.backends, agreement.notes) == ({}, ()), alloc
    assert agree_with_allocation(engines_config(), [], "").allocation == ""
    cli = ["actor.backend=fsdp:d2", "allocation_mode=fsdp:d2p1t1"]
    agreement = agree_with_allocation(
        engines_config(actor="fsdp:d2"), cli, "fsdp:d2p1t1"
    )
    assert agreement.backends == {
        "ref.backend": "fsdp:d2p1t1",
        "teacher.train.backend": "fsdp:d2p1t1",
    }


def test_a_command_line_backend_against_a_command_line_allocation_is_refused():
    cli = ["actor.backend=fsdp:d2", "allocation_mode=sglang:d1+fsdp:d4"]
    with pytest.raises(AllocationError) as e:
        agree_with_allocation(engines_config(actor="fsdp:d2"), cli, "sglang:d1+fsdp:d4")
    message = str(e.value)
    # What is wrong (both keys), why, what to do.
    assert message.startswith(
        "actor.backend=fsdp:d2 and allocation_mode=sglang:d1+fsdp:d4 (both on the "
        "command line) ask for different training layouts (fsdp:d2 vs fsdp:d4)."
    )
    assert "device mesh" in message
    assert "Drop actor.backend=fsdp:d2" in message
    assert message.endswith("allocation_mode=sglang:d1+fsdp:d2.")
    # A section set on the command line sets its backend there too.
    with pytest.raises(AllocationError, match="critic.backend=fsdp:d4"):
        agree_with_allocation(
            engines_config(critic="fsdp:d4"),
            ["++critic={backend: fsdp:d4}", "allocation_mode=fsdp:d2"],
            "fsdp:d2",
        )


def test_a_command_line_backend_sets_the_yamls_allocation():
    agreement = agree_with_allocation(
        engines_config(actor="fsdp:d2"), ["actor.backend=fsdp:d2"]
    )
    assert agreement.allocation == "sglang:d1+fsdp:d2"
    assert agreement.notes[0] == (
        "actor.backend=fsdp:d2 (command line) sets the training part of the YAML's "
        "allocation_mode: sglang:d1+fsdp:d1 -> sglang:d1+fsdp:d2."
    )
    assert agreement.backends == {
        "ref.backend": "fsdp:d2",
        "teacher.train.backend": "fsdp:d2",
    }
    # Two command-line backends that differ: no one layout to give.
    cli = ["actor.backend=fsdp:d2", "ref.backend=fsdp:d4"]
    with pytest.raises(AllocationError) as e:
        agree_with_allocation(engines_config(actor="fsdp:d2", ref="fsdp:d4"), cli)
    assert str(e.value).startswith(
        "actor.backend=fsdp:d2 and ref.backend=fsdp:d4 (both on the command line)"
    )


@pytest.mark.parametrize(
    "alloc,message",
    [
        ("fsdp:d2p2", "is not an allocation AReaL accepts: FSDP backend only"),
        ("sglang[r]:d1+fsdp[a]:d1+fsdp[c]:d1", "has 2 training parts"),
    ],
)
def test_allocations_no_backend_can_follow_are_refused(alloc, message):
    with pytest.raises(AllocationError, match=message) as e:
        agree_with_allocation(engines_config(), [], alloc)
    assert "++allocation_mode=" in str(e.value)


def test_the_launchers_set_the_backends_for_their_trainers(monkeypatch):
    monkeypatch.delenv("AREAL_LLM_SERVER_ADDRS", raising=False)
    # The issue's command line: the YAML's actor.backend is fsdp:d1.
    replay = plan_launch(
        argv("debug.replay_rollout_data=true", "allocation_mode=d2p1t1")
    )
    assert replay.config.actor.backend == "fsdp:d2p1t1"
    assert replay.argv[-2:] == [
        "++actor.backend=fsdp:d2p1t1",
        "++allocation_mode=fsdp:d2p1t1",
    ]
    changed = [n for n in replay.notes if "actor.backend fsdp:d1 -> fsdp:d2p1t1" in n]
    assert len(changed) == 1
    dump = plan_launch(
        argv("debug.dump_rollout_data=true", "allocation_mode=sglang:d1+fsdp:d2")
    )
    assert dump.config.actor.backend == "fsdp:d2"
    assert "++actor.backend=fsdp:d2" in dump.argv
    # A named training part reaches the trainers in a form hydra parses.
    named = plan_launch(
        argv(
            "debug.replay_rollout_data=true",
            "allocation_mode='sglang[r]:d1+fsdp[a]:d2'",
        )
    )
    assert "++allocation_mode='fsdp[a]:d2'" in named.argv
    assert named.config.actor.backend == "fsdp:d2"
    from areal_debug.launcher.common import parse_config

    assert parse_config(named.argv)[0].allocation_mode == "fsdp[a]:d2"


@pytest.mark.parametrize("kind", ["local", "slurm"])
def test_a_conflict_exits_2_before_any_process_starts(kind, monkeypatch, capsys):
    import importlib

    from areal_debug.launcher import common, local

    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(common, "run_areal_launcher", no_process)
    monkeypatch.setattr(local, "run_areal_launcher", no_process)
    launcher = importlib.import_module(f"areal_debug.launcher.{kind}")
    args = argv(
        "debug.replay_rollout_data=true",
        "actor.backend=fsdp:d2",
        "allocation_mode=fsdp:d4",
    )
    assert launcher.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"areal_debug.launcher.{kind}: actor.backend=fsdp:d2 and allocation_mode=fsdp:d4"
    )


def test_single_controller_configs_follow_the_allocation(monkeypatch, tmp_path):
    """No launcher in single-controller mode: load_expr_config does it."""
    from areal.api.cli_args import GRPOConfig

    from areal_debug import load_expr_config
    from areal_debug.testing import example_config

    monkeypatch.setenv("AREAL_DEBUG_WORKDIR", str(tmp_path))
    config_file = str(example_config(sc=True))
    config, _ = load_expr_config(
        ["--config", config_file, "allocation_mode=sglang:d1+fsdp:d2"], GRPOConfig
    )
    assert (config.actor.backend, config.allocation_mode) == (
        "fsdp:d2",
        "sglang:d1+fsdp:d2",
    )
    config, _ = load_expr_config(
        ["--config", config_file, "actor.backend=fsdp:d2"], GRPOConfig
    )
    assert config.allocation_mode == "sglang:d1+fsdp:d2"
    with pytest.raises(AllocationError, match="Drop actor.backend=fsdp:d2"):
        load_expr_config(
            [
                "--config",
                config_file,
                "actor.backend=fsdp:d2",
                "allocation_mode=fsdp:d4",
            ],
            GRPOConfig,
        )


def test_doctor_reads_the_config_as_the_run_will(monkeypatch, tmp_path):
    """doctor's config has the backends the run will have, and its conflicts."""
    from areal_debug.inspect.common import InspectError
    from areal_debug.inspect.preflight.doctor import load_command_config
    from areal_debug.testing import example_config

    monkeypatch.setenv("AREAL_DEBUG_WORKDIR", str(tmp_path))
    command = ["python", "train.py", "--config", str(example_config())]
    config = load_command_config([*command, "allocation_mode=fsdp:d2"])
    assert config.actor.backend == "fsdp:d2"
    with pytest.raises(InspectError, match="Drop actor.backend=fsdp:d4"):
        load_command_config(
            [*command, "allocation_mode=fsdp:d2", "actor.backend=fsdp:d4"]
        )


def test_deterministic_config_exports_the_environment():
    plan = plan_launch(argv("debug.deterministic=true"))
    assert plan.extra_env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert plan.extra_env["NCCL_ALGO"] == "Ring"
    assert plan.extra_env["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] == "0"
    plan = plan_launch(argv("debug.deterministic=false"))
    assert "NCCL_ALGO" not in plan.extra_env


def test_cpu_launcher_runs_jobs_and_keeps_their_exit_status(tmp_path):
    launcher = CpuSafeLocalLauncher("exp", "trial", str(tmp_path))
    CpuSafeLocalLauncher.started = {}
    launcher.submit_array("ok", "echo fine", gpu=1)  # AReaL would emit `=0 stdbuf ...`
    launcher.submit_array("bad", "sh -c 'echo broken; exit 3'", gpu=1)
    assert CpuSafeLocalLauncher.started["ok/0"].wait() == 0
    assert CpuSafeLocalLauncher.started["bad/0"].wait() == 3  # not tee's 0
    assert "fine" in open(launcher.log_path_of("ok")).read()
    launcher.forget_jobs()


# -- the real launcher, end to end (the shared spmd_d2 recording) -----------------


def started_commands(log: str) -> list[str]:
    return [
        line
        for line in log.splitlines()
        if "Starting local process with command" in line
    ]


@pytest.mark.areal
def test_replay_through_the_launcher_starts_only_the_trainer_and_exits_with_it(
    spmd_d1,
):
    # The dump's allocation, server and trainer: the replay starts the trainer
    # alone, on the training part. Asked for two steps more than were recorded,
    # the trainer names them before its first step, and the launcher exits with
    # the trainer's status. (Launcher replays that run to the end, bitwise:
    # tests/test_example_script_launcher.py; on two processes: the shipped
    # example below.)
    run = run_launcher(
        str(spmd_d1.workdir),
        "replay-fail",
        [
            "allocation_mode=sglang:d1+fsdp:d1",
            f"total_train_steps={SPMD_D1_STEPS + 2}",
            *spmd_d1.train_overrides,
            "debug.replay_rollout_data=true",
            "debug.replay_trial_name=fail",
        ],
    )
    assert run.returncode == 1
    # The launcher logs every process it starts: this one alone shows that no
    # inference server was started.
    (command,) = started_commands(run.log)
    assert "torchrun" in command and "--nproc-per-node 1" in command
    assert "++allocation_mode=fsdp:d1" in command
    last = SPMD_D1_STEPS - 1
    assert f"lacks steps {last + 1}-{last + 2}" in run.log
    assert f"complete steps: 0-{last}" in run.log
    assert "Trainer failed (exit status 1)" in run.log
    assert "COMPLETED" not in run.log.split("Trainer failed", 1)[1].splitlines()[0]


# -- the shipped example at the allocation given (issue #30) ----------------------


def launch_example(workdir, name: str, overrides: list[str], server=None):
    """The mission's command line: examples/rlvr_debug.py on the shipped
    configs/tiny_cpu.yaml (unchanged) through areal_debug.launcher.local."""
    from areal_debug.testing import EXAMPLE_SCRIPT, SPMD_CONFIG, run_env

    cmd = [
        sys.executable,
        "-m",
        "areal_debug.launcher.local",
        str(EXAMPLE_SCRIPT),
        "--config",
        str(SPMD_CONFIG),
        *overrides,
    ]
    env = run_env(workdir, server_addr=server)
    return run_logged(cmd, str(workdir), name, env, 600)


# The one-process recording re-split over two processes (test_mismatch.py's
# two-rank replay) made again through the launcher: a variant (make test-long,
# which CI runs). The shorthand only: a backend-prefixed allocation ("fsdp:d2")
# takes the same path from the plan on. Both plans are tested above without
# running them.
@pytest.mark.areal
@pytest.mark.variant
@pytest.mark.parametrize("alloc,layout", [("d2p1t1", "fsdp:d2p1t1")])
def test_shipped_example_replays_one_process_recording_at_the_given_allocation(
    spmd_d1, alloc, layout
):
    trial = "alloc_" + alloc.replace(":", "")
    rc, log = launch_example(
        spmd_d1.workdir,
        f"replay-{trial}",
        [
            "debug.replay_rollout_data=true",
            f"allocation_mode={alloc}",
            f"debug.path={spmd_d1.path}",
            f"debug.replay_trial_name={trial}",
            "total_train_steps=2",
            *spmd_d1.train_overrides,
        ],
    )
    assert rc == 0, log[-3000:]
    if alloc == "d2p1t1":  # a bare legacy allocation (no backend)
        assert "read as the training allocation fsdp:d2p1t1" in log
    # The YAML's actor.backend (fsdp:d1) follows the allocation, said once.
    assert log.count(f"actor.backend fsdp:d1 -> {layout}.") == 1
    (command,) = started_commands(log)
    assert "--nproc-per-node 2" in command and f"++actor.backend={layout}" in command
    assert "Topology changed: recorded in spmd mode (1 shard(s)" in log
    # Each step's one shard is re-split over the two processes, every trajectory kept.
    assert "re-split" in log
    report = replay_report(str(spmd_d1.workdir), "tinydemo", trial)
    assert report["summary"]["steps"] == 2
    topology = report["topology"]
    assert topology["changed"] is True
    assert (topology["recorded_train_dp"], topology["replay_train_dp"]) == (1, 2)
    assert_whole_batch_statistics_kept(report)
    for entry in report["steps"]:
        replayed = [m["replayed"] for m in entry["metrics"].values() if "replayed" in m]
        assert replayed and all(math.isfinite(v) for v in replayed)


# -- Ray and Slurm: AReaL's real entry points, with a launcher that records --------


class RecordingLauncher:
    """Stands in for RayLauncher/SlurmLauncher: records what would be submitted."""

    submitted: list[dict] = []

    def __init__(self, *args, **kwargs):
        pass

    def submit_array(self, job_name, *args, **kwargs):
        RecordingLauncher.submitted.append(
            {"job_name": job_name, "args": args, **kwargs}
        )

    def submit(self, job_name, *args, **kwargs):
        self.submit_array(job_name, *args, **kwargs)

    def wait(self, *args, **kwargs):
        pass

    def stop_all(self, *args, **kwargs):
        pass


def dry_run(kind, tmp_path, monkeypatch, *overrides):
    """areal_debug.launcher.<kind>.main with AReaL's launcher class recording instead."""
    import importlib

    from areal_debug.launcher.common import plan_launch

    ours = importlib.import_module(f"areal_debug.launcher.{kind}")
    areal_module = importlib.import_module(f"areal.infra.launcher.{kind}")
    attr = {"ray": "RayLauncher", "slurm": "SlurmLauncher"}[kind]
    monkeypatch.setattr(areal_module, attr, RecordingLauncher)
    if kind == "ray":
        monkeypatch.setattr(ours, "_init_ray", lambda: None)
        monkeypatch.setattr(areal_module, "RAY_LAUNCHER", None)
    (tmp_path / "name_resolve").mkdir(exist_ok=True)
    # A replay's recording is looked for before anything is submitted.
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    (rec / "manifest.json").write_text("{}")
    args = argv(f"cluster.fileroot={tmp_path}", f"debug.path={rec}", *overrides)
    RecordingLauncher.submitted = []
    assert ours.main(args) == 0
    return plan_launch(args, resize_cluster=True), RecordingLauncher.submitted


@pytest.mark.parametrize("kind", ["ray", "slurm"])
def test_distributed_replay_submits_only_the_trainer_on_the_training_nodes(
    kind, tmp_path, monkeypatch
):
    plan, jobs = dry_run(
        kind,
        tmp_path,
        monkeypatch,
        "debug.replay_rollout_data=true",
        "allocation_mode=sglang:d8+fsdp:d16",
        "cluster.n_nodes=3",
        "cluster.n_gpus_per_node=8",
    )
    assert [j["job_name"] for j in jobs] == ["trainer"]
    job = jobs[0]
    text = repr(job)
    assert "++allocation_mode=fsdp:d16" in text
    assert "++cluster.n_nodes=2" in text and "sglang_server" not in text
    assert (plan.config.cluster.n_nodes, plan.config.cluster.n_gpus_per_node) == (2, 8)
    assert job["count"] == (16 if kind == "ray" else 2)
    envs = job["env_vars"] if isinstance(job["env_vars"], list) else [job["env_vars"]]
    for env in envs:
        assert (
            env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        )  # debug.deterministic in the YAML
        assert env["AREAL_LLM_SERVER_ADDRS"] == ""


def test_distributed_replay_on_part_of_a_node(tmp_path, monkeypatch):
    plan, jobs = dry_run(
        "ray",
        tmp_path,
        monkeypatch,
        "debug.replay_rollout_data=true",
        "allocation_mode=sglang:d4+fsdp:d4",
        "cluster.n_gpus_per_node=8",
    )
    assert (plan.config.cluster.n_nodes, plan.config.cluster.n_gpus_per_node) == (1, 4)
    assert [j["job_name"] for j in jobs] == ["trainer"] and jobs[0]["count"] == 4


def test_distributed_server_only_allocation_exits_2(capsys):
    from areal_debug.launcher import slurm

    args = argv("debug.replay_rollout_data=true", "allocation_mode=sglang:d8")
    assert slurm.main(args) == 2
    assert "has no training part" in capsys.readouterr().err


def test_distributed_training_part_must_fill_whole_nodes():
    with pytest.raises(AllocationError, match="whole number of nodes"):
        plan_launch(
            argv(
                "debug.replay_rollout_data=true",
                "allocation_mode=sglang:d4+fsdp:d12",
                "cluster.n_gpus_per_node=8",
            ),
            resize_cluster=True,
        )


def _no_process(monkeypatch):
    from areal_debug.launcher import common, local

    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(common, "run_areal_launcher", no_process)
    monkeypatch.setattr(local, "run_areal_launcher", no_process)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["debug.replay_rollout_data=true", "debug.replay_end_stpe=2"],
            "debug.replay_end_stpe is not a debug key. Did you mean "
            "debug.replay_end_step",
        ),
        (
            ["debug.replay_rollout_data=true", "++debug.pathh=/x"],
            "Did you mean debug.path?",
        ),
        (
            ["debug.replay_rollout_data=true", "debug.dump_rollout_data=true"],
            "debug.dump_rollout_data=true and debug.replay_rollout_data=true",
        ),
        (
            # A typo in AReaL's own keys: the closest key, not hydra's "+KEY"
            # (add it), which for a typo is the wrong fix (issue 69, point 3).
            ["debug.replay_rollout_data=true", "actor.optimizr.lr=1e-5"],
            "'actor.optimizr.lr=1e-5': actor has no key 'optimizr'; did you mean "
            "actor.optimizer.lr?",
        ),
        (
            ["debug.replay_rollout_data=true", "debug.path=/no/such/recording"],
            "No recording to replay at debug.path=/no/such/recording: it does not "
            "exist",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["local", "slurm"])
def test_debug_mistakes_exit_2_in_one_line_before_any_process(
    kind, overrides, message, monkeypatch, capsys
):
    """A typo in a debug key, both modes at once, a recording that is not there:
    the launcher says so in one line, with the closest key, before AReaL or any
    process starts, instead of a traceback from inside the trainers."""
    import importlib

    _no_process(monkeypatch)
    launcher = importlib.import_module(f"areal_debug.launcher.{kind}")
    assert launcher.main(argv(*overrides)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"areal_debug.launcher.{kind}: ") and message in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_recording_one_level_down_is_named(monkeypatch, capsys, tmp_path):
    from areal_debug.launcher import local

    _no_process(monkeypatch)
    (tmp_path / "areal_debug_recording").mkdir()
    (tmp_path / "areal_debug_recording" / "manifest.json").write_text("{}")
    args = argv("debug.replay_rollout_data=true", f"debug.path={tmp_path}")
    assert local.main(args) == 2
    err = capsys.readouterr().err
    assert f"Set debug.path={tmp_path}/areal_debug_recording." in err


def test_load_expr_config_says_a_debug_mistake_in_one_line(capsys):
    """A script's own load_expr_config: the message alone, exit status 2, as the
    launchers say it; no traceback through AReaL's config loading."""
    from areal_debug.config import load_expr_config

    with pytest.raises(SystemExit) as e:
        load_expr_config(["--config", FAKE_CONFIG, "debug.replay_end_stpe=2"])
    assert e.value.code == 2 and e.value.__cause__ is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("areal-debug: 'debug.replay_end_stpe=2'")
    assert "Did you mean debug.replay_end_step" in line
    both = ["debug.replay_rollout_data=true", "debug.dump_rollout_data=true"]
    with pytest.raises(SystemExit) as e:
        load_expr_config(["--config", FAKE_CONFIG, *both])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "cannot be combined" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:
        load_expr_config(["--config", FAKE_CONFIG, "total_train_step=2"])
    assert e.value.code == 2 and e.value.__cause__ is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "areal-debug: 'total_train_step=2': the config has no key "
        "'total_train_step'; did you mean total_train_steps or total_train_n_seqs "
        "or total_train_epochs?"
    )


@pytest.mark.each_areal
def test_arealss_v2_controllers_are_refused_before_any_process_with_why():
    """rollout._version=v2 (RolloutControllerV2, in every AReaL since 1.0.4) goes
    around the hooks a dump records at: refused in dump and replay, by the
    launcher and by a user's own script, before anything starts."""
    from areal_debug.config import (
        DebugConfigError,
        load_expr_config,
        refuse_controller_v2,
    )

    v2 = ("++rollout._version=v2", "++actor._version=v2")
    for flag in ("debug.dump_rollout_data=true", "debug.replay_rollout_data=true"):
        with pytest.raises(DebugConfigError) as e:
            plan_launch(argv(flag, *v2))
        text = str(e.value)
        assert "rollout._version=v2 and actor._version=v2" in text
        assert "rollout._version=v1 actor._version=v1" in text
    # Without debug, AReaL's own v2 run is none of our business.
    plan_launch(argv(*v2))
    # A script's config object (AReaL's dataclasses): the same check.
    config, _ = load_expr_config(["--config", FAKE_CONFIG, *v2])
    assert config.rollout._version == "v2"
    with pytest.raises(DebugConfigError, match="RolloutControllerV2"):
        refuse_controller_v2(config)
    config, _ = load_expr_config(["--config", FAKE_CONFIG])
    refuse_controller_v2(config)
