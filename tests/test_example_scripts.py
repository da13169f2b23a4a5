# SPDX-License-Identifier: Apache-2.0
"""A script shaped like AReaL 1.0.4's own gsm8k example, recorded and replayed.

``tests/scripts/gsm8k_rl.py`` keeps AReaL's way of working: its own config class
(in ``__main__``), its own trainer subclass, ``get_custom_dataset`` (AReaL's data
service in single-controller mode), a YAML with no ``allocation_mode`` and no
``debug:`` section. The dump runs against the CPU server; the replay runs the
unchanged script with no server, no rollout worker and no data service.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.harness import TESTS, recording_dir, replay_report, run_logged

from areal_debug.server_attach import TEACHER_ADDRS_ENV
from areal_debug.store_reader import RecordingReader

pytestmark = pytest.mark.areal

SCRIPT = os.path.join(TESTS, "scripts", "gsm8k_rl.py")
STEPS = 2


@dataclass(frozen=True)
class Example:
    config: str
    experiment: str
    # Timings (in the logged statistics) only this config's training side has.
    marker_stats: tuple[str, ...] = ()
    # A teacher served as an inference engine: the dump gets its own CPU server.
    teacher: bool = False

    @property
    def config_path(self) -> str:
        return os.path.join(TESTS, "scripts", self.config)


EXAMPLES = {
    # GRPO with a teacher served as an inference engine (distillation).
    "grpo-teacher": Example("gsm8k_distill_cpu.yaml", "gsm8k-distill", teacher=True),
    # Critic values and reference log-probs are computed on the training side.
    "ppo-critic-ref": Example(
        "gsm8k_ppo_cpu.yaml",
        "gsm8k-ppo",
        ("timeperf/critic_values", "timeperf/critic_train_step", "timeperf/ref_logp"),
    ),
}


def write_gsm8k(root: Path, n_train: int = 32, n_test: int = 8) -> Path:
    """A local dataset AReaL loads as gsm8k: a ``gsm8k`` folder with config ``main``."""
    d = root / "gsm8k"
    (d / "main").mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        with open(d / "main" / f"{split}.jsonl", "w") as f:
            for i in range(n):
                a, b = i % 7, (3 * i) % 5
                row = {
                    "question": f"what is {a} + {b} ?",
                    "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
                }
                f.write(json.dumps(row) + "\n")
    (d / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train.jsonl\n"
        "  - split: test\n    path: main/test.jsonl\n---\n"
    )
    return d


@pytest.fixture(scope="module")
def gsm8k_workdir(tmp_path_factory, tiny_assets) -> Path:
    d = tmp_path_factory.mktemp("gsm8k")
    os.symlink(tiny_assets / "model", d / "model")
    write_gsm8k(d)
    os.makedirs(d / "root" / "name_resolve")
    return d


def env_for(
    workdir: Path, server_addr: str | None = None, teacher_addr: str | None = None
) -> dict:
    env = {
        **os.environ,
        "AREAL_DEBUG_WORKDIR": str(workdir),
        "OMP_NUM_THREADS": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    for key in ("AREAL_LLM_SERVER_ADDRS", TEACHER_ADDRS_ENV, "AREAL_SPMD_MODE"):
        env.pop(key, None)
    if server_addr is not None:
        env["AREAL_LLM_SERVER_ADDRS"] = server_addr
        env["AREAL_DEBUG_CPU_SERVER"] = "1"
    if teacher_addr is not None:
        env[TEACHER_ADDRS_ENV] = teacher_addr
    return env


def run_script(
    workdir: Path,
    example: Example,
    name,
    overrides: list[str],
    server=None,
    teacher=None,
):
    cmd = [sys.executable, SCRIPT, "--config", example.config_path, *overrides]
    env = env_for(workdir, server, teacher)
    rc, log = run_logged(cmd, str(workdir), name, env, 900)
    # The CPU server of a dump is the test's own, ended by it.
    left = [p for p in processes_of(workdir) if "tooling.cpu_server" not in p]
    assert left == [], f"{name} left processes behind"
    return rc, log


def processes_of(workdir: Path) -> list[str]:
    """Live processes started for ``workdir`` (RPC, data-service, server...):
    they all inherit its AREAL_DEBUG_WORKDIR."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.environ().get("AREAL_DEBUG_WORKDIR") != str(workdir):
                continue
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        if proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(" ".join(proc.info["cmdline"] or []))
    return found


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request) -> Example:
    return EXAMPLES[request.param]


@pytest.fixture(scope="module")
def gsm8k_dump(gsm8k_workdir, example):
    from areal_debug.testing import end_process, start_server

    servers = []
    try:
        servers.append(start_server(gsm8k_workdir, env_for(gsm8k_workdir)))
        if example.teacher:
            # The teacher keeps its weights; the rollout server gets the actor's.
            servers.append(
                start_server(gsm8k_workdir, env_for(gsm8k_workdir), name="teacher")
            )
        addrs = [addr for _, addr in servers]
        rc, log = run_script(
            gsm8k_workdir,
            example,
            f"dump-{example.experiment}",
            ["debug.dump_rollout_data=true", "debug.deterministic=true"],
            *addrs,
        )
    finally:
        for proc, _ in servers:
            end_process(proc)
    assert processes_of(gsm8k_workdir) == []
    assert rc == 0, log[-4000:]
    return log


def test_dump_of_an_unchanged_example_script(gsm8k_workdir, example, gsm8k_dump):
    # The data service served the datasets (AReaL's default in this mode).
    assert "role 'data" in gsm8k_dump
    assert "ScriptTrainer.train (export_style=concat)" in gsm8k_dump
    assert "lives in the script's __main__" in gsm8k_dump
    reader = RecordingReader(
        recording_dir(str(gsm8k_workdir), example.experiment, "trial0")
    )
    assert reader.available_steps() == list(range(STEPS))
    manifest = reader.manifest
    assert manifest.config["export_style"] == "concat"
    assert manifest.config["debug"]["dump_rollout_data"] is True
    assert all(w["torch_deterministic_algorithms"] for w in manifest.worker_determinism)
    for key in example.marker_stats:
        assert key in gsm8k_dump, key
    for step in range(STEPS):
        batch = reader.load_shard(step, 0)
        assert len(batch) == 8 and batch[0]["input_ids"].shape[0] == 4
        stats = reader.recorded_stats(step)
        if example.marker_stats:
            # The KL penalty against the reference model is in the rewards.
            assert stats["ppo_actor/kl_rewards/avg"] != 0.0
        if example.teacher:
            # One score per generated token of each trajectory, from the teacher.
            logps = reader.recorded_teacher_logp(step)
            assert [t.shape for t in logps] == [t["loss_mask"].shape for t in batch]
            for t, traj in zip(logps, batch, strict=True):
                scored = traj["loss_mask"].bool()
                assert bool((t[scored] < 0).all()) and bool((t[~scored] == 0).all())
    assert manifest.recorded_teacher_logp is example.teacher
    if example.teacher:
        assert "The teacher workers attach to running inference servers" in gsm8k_dump
        assert "role 'teacher'" in gsm8k_dump


def test_replay_starts_only_what_trains_and_is_bitwise(
    gsm8k_workdir, example, gsm8k_dump
):
    rc, log = run_script(
        gsm8k_workdir,
        example,
        f"replay-{example.experiment}",
        ["debug.replay_rollout_data=true", "debug.deterministic=true"],
    )
    assert rc == 0, log[-4000:]
    assert "Creating 1 workers for role 'actor'" in log
    # No rollout worker, no inference server, no data service, no dataset read.
    assert "role 'rollout'" not in log and "role 'data" not in log
    assert "role 'teacher'" not in log
    assert "the datasets are not read" in log
    assert "ScriptTrainer.train (export_style=concat)" in log
    if example.teacher:
        assert "the teacher's log-probs come from the recording" in log
    report = replay_report(str(gsm8k_workdir), example.experiment, "trial0_replay")
    assert report["summary"]["all_identical"] is True
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        assert len(entry["metrics"]) > 90
