# SPDX-License-Identifier: Apache-2.0
"""The recordings the process-level tests replay from, each recorded once per test run.

- ``spmd_d1``: SPMD, one process (torchrun), the fake engine, attention dropout
  active in training, 5 steps with an AReaL recover checkpoint after each (kept
  with the recording);
- ``spmd_d2``: SPMD, two data-parallel heads, started through
  ``areal_debug.launcher.local`` (train-only allocation: the fake engine needs no
  server), 3 steps;
- ``sc_d2``: single-controller (the shipped example against the CPU server),
  two FSDP workers, 3 steps with recover checkpoints.

A test never writes into a recording: replays run under their own trial names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.harness import (
    Run,
    end_session,
    recording_dir,
    run_example,
    run_launcher,
    run_torchrun,
)
from support.workdirs import make_workdir

DROPOUT = ["actor.disable_dropout=false"]
ANOMALY_THRESHOLD = "ppo_actor/update/grad_norm > 0"
SPMD_D1_STEPS = 5
SPMD_D2_STEPS = 3
SC_STEPS = 3
SC_EXPERIMENT = "tinydemo"
# The single-controller recording trains on two FSDP workers: the train
# controller then balances each batch over them, by AReaL's trajectory weights.
SC_TRAIN_D2 = ("actor.backend=fsdp:d2", "allocation_mode=sglang:d1+fsdp:d2")


@dataclass
class Recorded:
    workdir: Path
    run: Run
    experiment: str = "tiny"
    trial: str = "t0"
    # Training settings of the dump run that its replays must repeat.
    train_overrides: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return recording_dir(str(self.workdir), self.experiment, self.trial)


def _workdir(tmp_path_factory, tiny_assets, name: str, model: bool = True) -> Path:
    return make_workdir(tmp_path_factory.mktemp(name), tiny_assets, model=model)


@pytest.fixture(scope="session")
def spmd_d1(tmp_path_factory, tiny_assets) -> Recorded:
    from areal_debug.tooling.tiny_task import build_tiny_model

    d = _workdir(tmp_path_factory, tiny_assets, "spmd_d1", model=False)
    build_tiny_model(str(d / "model"), dropout=0.3)
    run = run_torchrun(
        str(d),
        "dump",
        1,
        [
            *DROPOUT,
            f"total_train_steps={SPMD_D1_STEPS}",
            "debug.dump_rollout_data=true",
            "recover.mode=on",
            "++recover.freq_steps=1",
            # Fires at every step: the anomaly hook in a real run (files only).
            f"debug.anomaly_thresholds=['{ANOMALY_THRESHOLD}']",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    assert len(run.stats) == SPMD_D1_STEPS
    return Recorded(d, run, train_overrides=tuple(DROPOUT))


@pytest.fixture(scope="session")
def spmd_d2(tmp_path_factory, tiny_assets) -> Recorded:
    d = _workdir(tmp_path_factory, tiny_assets, "spmd_d2")
    run = run_launcher(
        str(d),
        "dump",
        [
            "allocation_mode=fsdp:d2",
            "actor.backend=fsdp:d2",
            "debug.dump_rollout_data=true",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    assert len(run.stats) == SPMD_D2_STEPS
    return Recorded(d, run)


@pytest.fixture(scope="session")
def sc_workdir(tmp_path_factory, tiny_assets) -> Path:
    return _workdir(tmp_path_factory, tiny_assets, "sc")


@pytest.fixture(scope="session")
def cpu_server(sc_workdir):
    """The CPU server speaking SGLang's protocol, for the single-controller dumps."""
    from areal_debug.testing import start_server

    proc, addr = start_server(sc_workdir, {**os.environ, "OMP_NUM_THREADS": "1"})
    yield addr
    end_session(proc)


@pytest.fixture(scope="session")
def sc_d2(sc_workdir, cpu_server) -> Recorded:
    overrides = [
        "debug.dump_rollout_data=true",
        f"total_train_steps={SC_STEPS}",
        "trial_name=sc",
        *SC_TRAIN_D2,
        "recover.mode=on",
        "++recover.freq_steps=1",
    ]
    run = run_example(sc_workdir, "dump-sc", "single-controller", overrides, cpu_server)
    assert run.returncode == 0, run.log[-3000:]
    return Recorded(sc_workdir, run, experiment=SC_EXPERIMENT, trial="sc")


@pytest.fixture(scope="session")
def spmd_d1_replay(spmd_d1) -> Run:
    """The whole ``spmd_d1`` recording replayed at one process (default trial
    ``t0_replay``), RNG states restored: several tests read this one run."""
    return run_torchrun(
        str(spmd_d1.workdir),
        "replay",
        1,
        [
            *DROPOUT,
            f"total_train_steps={SPMD_D1_STEPS}",
            "debug.replay_rollout_data=true",
        ],
    )
