# SPDX-License-Identifier: Apache-2.0
"""``scheduler.type: slurm`` in single-controller mode, to the submitted job.

No Slurm cluster here: AReaL's real ``SlurmScheduler`` (built as PPOTrainer builds
it) submits through an ``sbatch`` stand-in on PATH that keeps the script. The test
checks what a cluster would run: the deterministic worker module in place of
AReaL's RPC server and the determinism environment on every engine's workers,
the teacher's too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from areal_debug import determinism

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def sbatch(tmp_path, monkeypatch) -> Path:
    """An ``sbatch`` that keeps each submitted script and reports a job id."""
    bin_dir, kept = tmp_path / "bin", tmp_path / "submitted"
    bin_dir.mkdir()
    kept.mkdir()
    exe = bin_dir / "sbatch"
    exe.write_text(f'#!/bin/sh\ncp "$1" {kept}/\necho "Submitted batch job 4242"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return kept


def distill_config(workdir: Path):
    from areal.api.cli_args import GRPOConfig

    from areal_debug import load_expr_config

    (workdir / "root" / "name_resolve").mkdir(parents=True)
    config, _ = load_expr_config(
        [
            "--config",
            str(SCRIPTS / "gsm8k_distill_cpu.yaml"),
            "scheduler.type=slurm",
            "debug.deterministic=true",
            f"cluster.fileroot={workdir / 'root'}",
        ],
        GRPOConfig,
    )
    return config


@pytest.mark.parametrize("role", ["actor", "rollout", "teacher"])
def test_slurm_jobs_start_deterministic_workers(tmp_path, monkeypatch, sbatch, role):
    from areal.api.scheduler_api import Job
    from areal.infra.scheduler.slurm import SlurmScheduler

    monkeypatch.setenv("AREAL_DEBUG_WORKDIR", str(tmp_path))
    config = distill_config(tmp_path)
    report_dir = str(tmp_path / "settings")
    assert determinism.configure_workers(config, report_dir) == []
    specs = {
        "actor": config.actor,
        "rollout": config.rollout,
        "teacher": config.teacher.rollout,
    }[role].scheduling_spec
    scheduler = SlurmScheduler(exp_config=config)  # as PPOTrainer._init_scheduler
    ids = scheduler.create_workers(Job(role=role, replicas=1, tasks=list(specs)))
    assert ids == [f"{role}/0"]
    (script,) = [p.read_text() for p in sbatch.iterdir()]
    assert f"-m {determinism.WORKER_MODULE} --experiment-name gsm8k-distill" in script
    assert determinism.RPC_SERVER_MODULE not in script
    # AReaL's default container mode passes each spec's env_vars with --env.
    for key, value in {
        **determinism.DETERMINISM_ENV,
        determinism.WORKER_REPORT_ENV: report_dir,
    }.items():
        assert f"--env {key}={value}" in script, key
