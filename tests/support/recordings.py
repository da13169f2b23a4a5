# SPDX-License-Identifier: Apache-2.0
"""The recordings the process-level tests replay from, each recorded once per test run.

- ``spmd_d1``: SPMD, one process (torchrun), the fake engine, attention dropout
  active in training, 5 steps with an AReaL recover checkpoint after each (kept
  with the recording), each sample's part in step 0 computed (``debug.blame_steps``);
- ``spmd_d2``: SPMD, two data-parallel heads, started through
  ``areal_debug.launcher.local`` (train-only allocation: the fake engine needs no
  server), one mini-batch a step, 5 steps; the second head's engine fails one
  rollout request while step ``SPMD_D2_FAILED_STEP``'s batch is prepared (the
  batch is whole: the rollout is rejected and replaced);
- ``sc_d2``: single-controller, made by ``areal-debug demo --single-controller
  --nproc 2`` (the shipped example against the CPU server, then its replay by
  the demo's own ``run_replay.sh``), two FSDP workers, 3 steps with recover
  checkpoints; the server reports a quarter of step 1's sampled log-probs 4 nats
  low (``SC_SPIKE``), which a user threshold pins, and refuses every request for
  one prompt of step ``SC_REFUSED_STEP`` (its rollouts fail in a rollout worker,
  which pins the step); each sample's part in step 0 computed in the workers;
- ``bisect_d1``: SPMD, one process, the fake engine, 2 steps with a recover
  checkpoint after each: the bisects' trials replay step 1 alone.

A test never writes into a recording: replays run under their own trial names.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.harness import (
    Run,
    end_session,
    recording_dir,
    run_launcher,
    run_logged,
    run_torchrun,
)
from support.workdirs import make_workdir

DROPOUT = ["actor.disable_dropout=false"]
# spmd_d2 trains one mini-batch a step (spmd_d1 the test YAML's two).
ONE_MINI_BATCH = ("actor.ppo_n_minibatches=1",)
ANOMALY_THRESHOLD = "ppo_actor/update/grad_norm > 0"
SPMD_D1_STEPS = 5
SPMD_D2_STEPS = 5
SPMD_D2_FAILED_STEP = 2
SC_STEPS = 3
SC_EXPERIMENT, SC_TRIAL = "tinydemo", "trial0"
# The single-controller recording trains on two FSDP workers: the train
# controller then balances each batch over them, by AReaL's trajectory weights.
SC_TRAIN_D2 = ("actor.backend=fsdp:d2", "allocation_mode=sglang:d1+fsdp:d2")
# A training-inference mismatch spike planted at one step (the CPU server's
# --logprob-fault): step 1, so that steps on both sides of it are clean. Step 0
# stays clean for the tests that plant their own gap there (test_mismatch.py).
SC_SPIKE_STEP, SC_SPIKE_NATS = 1, 4.0
SC_SPIKE = f"version={SC_SPIKE_STEP},offset={-SC_SPIKE_NATS},share=0.25"
# 3 steps are too few for the running-median trigger (it starts at the 6th): a
# threshold, far above the clean steps' gap (thousandths of a nat).
SC_SPIKE_THRESHOLD = "areal_debug/mismatch/abs_diff/max > 1"
# The server refuses the first prompt it is asked at this weight version (step):
# its group's requests fail in the rollout worker's engine and are rejected.
SC_REFUSED_STEP = 2


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


@dataclass
class Demo(Recorded):
    """A recording ``areal-debug demo`` made, and the demo's own replay of it."""

    output: str = ""  # what the demo printed
    replay: Run | None = None


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
            # Step 0's layers, for the replays that change the model
            # (tests/test_layer_digests.py).
            "debug.layer_digests=0",
            # Each sample's part in step 0 (tests/test_blame.py): its replays
            # are bit for bit all the same.
            "debug.blame_steps=0",
        ],
    )
    assert run.returncode == 0, run.log[-3000:]
    assert len(run.stats) == SPMD_D1_STEPS
    return Recorded(d, run, train_overrides=tuple(DROPOUT))


@pytest.fixture(scope="session")
def spmd_d2(tmp_path_factory, tiny_assets) -> Recorded:
    from support.fake_engine import FAILED_REQUEST_ENV

    d = _workdir(tmp_path_factory, tiny_assets, "spmd_d2")
    run = run_launcher(
        str(d),
        "dump",
        [
            "allocation_mode=fsdp:d2",
            "actor.backend=fsdp:d2",
            f"total_train_steps={SPMD_D2_STEPS}",
            *ONE_MINI_BATCH,
            "debug.dump_rollout_data=true",
        ],
        env={FAILED_REQUEST_ENV: f"{SPMD_D2_FAILED_STEP}:1"},
    )
    assert run.returncode == 0, run.log[-3000:]
    assert len(run.stats) == SPMD_D2_STEPS
    return Recorded(d, run, train_overrides=ONE_MINI_BATCH)


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
def sc_d2(tmp_path_factory) -> Demo:
    """The single-controller demo at two FSDP workers, kept checkpoints on: the
    recording, and the same-mode replay the demo ran through run_replay.sh."""
    d = tmp_path_factory.mktemp("sc_demo")
    wd = d / "demo"
    cmd = [
        sys.executable,
        "-m",
        "areal_debug.cli",
        "demo",
        f"--workdir={wd}",
        f"--steps={SC_STEPS}",
        "--nproc=2",
        "--single-controller",
        f"--logprob-fault={SC_SPIKE}",
        f"debug.anomaly_thresholds=['{SC_SPIKE_THRESHOLD}']",
        "recover.mode=on",
        "++recover.freq_steps=1",
        # The trainer's per-token log-probs on each of the 2 ranks, kept for the
        # page's pairing by tokens (tests/test_html_report.py).
        "debug.record_stage_tensors=true",
        # Step 0's layers, digested in the workers (tests/test_layer_digests.py).
        "debug.layer_digests=0",
        # Each sample's part in step 0, computed in the two workers
        # (tests/test_blame.py); the demo's replay, not blamed, is bit for bit.
        "debug.blame_steps=0",
    ]
    from areal_debug.tooling.cpu_server import REFUSE_ENV

    env = {**os.environ, "OMP_NUM_THREADS": "1", REFUSE_ENV: str(SC_REFUSED_STEP)}
    rc, output = run_logged(cmd, str(d), "demo", env, 900)
    assert rc == 0, output[-3000:]
    logs = {name: (wd / f"{name}.log").read_text() for name in ("dump", "replay")}
    return Demo(
        wd,
        Run(rc, logs["dump"], []),
        experiment=SC_EXPERIMENT,
        trial=SC_TRIAL,
        train_overrides=SC_TRAIN_D2,
        output=output,
        replay=Run(rc, logs["replay"], []),
    )


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
            # And step 1's, in the replay (tests/test_blame.py).
            "debug.blame_steps=1",
        ],
    )


# The bisect tests' dump (tests/test_bisect.py, tests/test_bisect_source.py): two
# steps, a recover checkpoint kept after each, so that each trial replays step 1
# alone from step 0's.
BISECT_DUMP = (
    "total_train_steps=2",
    "debug.dump_rollout_data=true",
    "recover.mode=on",
    "++recover.freq_steps=1",
)


@pytest.fixture(scope="session")
def bisect_d1(tmp_path_factory, tiny_assets) -> Path:
    """The work directory of ``BISECT_DUMP`` at one process (the fake engine):
    the settings bisect and the source bisect each replay step 1 from it."""
    d = _workdir(tmp_path_factory, tiny_assets, "bisect_d1")
    run = run_torchrun(str(d), "dump", 1, list(BISECT_DUMP))
    assert run.returncode == 0, run.log[-3000:]
    return d
