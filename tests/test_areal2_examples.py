# SPDX-License-Identifier: Apache-2.0
"""AReaL 2.0.0's own example scripts, recorded and replayed with the README's edit.

``tests/scripts/areal2`` holds 2.0.0's scripts at their repository paths, each
with the two-line change (``load_expr_config`` from areal_debug, ``DebugPPOTrainer``),
and CPU YAMLs derived from 2.0.0's ``gsm8k_grpo_cpu.yaml``:

- ``examples/math/gsm8k_rl.py``: 2.0's ``MathAgent``, an OpenAI-client agent
  behind AReaL's proxy (``rollout.agent.mode: inline``);
- ``examples/multi_turn_math/gsm8k_rl_mt.py``: a ``RolloutWorkflow`` over
  in-process ``ArealOpenAI``, two turns, its own config class.

Single-controller mode, as 2.0 documents. Each is dumped once against the CPU
server and replayed with no server, proxy, data service or rollout worker; the
replay must match the recording bit for bit. AReaL 1.0.4 cannot run these
scripts (``MathAgent`` and ``gconfig.max_tokens`` are 2.0's), so on 1.0.4 they are
skipped; CI runs them in the AReaL 2.0 leg (``make test-leg AREAL=2.0.0``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.harness import (
    assert_identical,
    assert_only_in_dump,
    recording_dir,
    replay_report,
)
from support.scripts import (
    DUMP,
    REPLAY,
    SCRIPTS_SEED,
    env_for,
    processes_of,
    run_script,
)

from areal_debug.areal_compat import (
    areal_release,
    installed_areal_build,
    installed_areal_version,
)
from areal_debug.recording.reader import RecordingReader

pytestmark = [
    pytest.mark.areal,
    pytest.mark.each_areal,
    pytest.mark.scheduler(seed=SCRIPTS_SEED),
    pytest.mark.skipif(
        areal_release() < (2, 0),
        reason=f"AReaL 2.0's own example scripts; AReaL {installed_areal_version()} "
        "is installed (they run in the AReaL 2.0 leg: make test-leg AREAL=2.0.0 "
        "VENV=.venv-a2)",
    ),
]

STEPS = 2


@dataclass(frozen=True)
class Example:
    script: str
    config: str
    experiment: str
    trajectories: int  # per step: train_dataset.batch_size
    # Rows per trajectory entry: gconfig.n_samples, times up to max_turns where
    # each turn is exported as a row of its own (export_style individual).
    rows: tuple[int, int]
    # Rewards a row can carry: the math-verify reward (0 or 1), and for a turn
    # before the last, the last turn's discounted by 0.9 (apply_reward_discount).
    rewards: tuple[float, ...]
    proxy: bool  # the workflow is an agent class behind AReaL's proxy


EXAMPLES = {
    "math-agent": Example(
        "areal2/examples/math/gsm8k_rl.py",
        "areal2/cpu/gsm8k_grpo_cpu.yaml",
        "gsm8k-grpo-cpu",
        4,
        (2, 2),
        (0.0, 1.0),
        proxy=True,
    ),
    "multi-turn": Example(
        "areal2/examples/multi_turn_math/gsm8k_rl_mt.py",
        "areal2/cpu/gsm8k_grpo_mt_cpu.yaml",
        "gsm8k-grpo-mt-cpu",
        4,
        (2, 4),
        (0.0, 0.9, 1.0),
        proxy=False,
    ),
}


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request) -> Example:
    return EXAMPLES[request.param]


@pytest.fixture(scope="module")
def dump_log(gsm8k_workdir, example) -> str:
    from areal_debug.testing import end_process, start_server

    server, addr = start_server(gsm8k_workdir, env_for(gsm8k_workdir))
    try:
        rc, log = run_script(
            gsm8k_workdir,
            example.script,
            example.config,
            f"dump-{example.experiment}",
            DUMP,
            addr,
        )
    finally:
        end_process(server)
    assert processes_of(gsm8k_workdir) == []
    assert rc == 0, log[-4000:]
    return log


def test_dump_records_each_step_of_the_example(gsm8k_workdir, example, dump_log):
    # AReaL's rollout workers generated against the CPU server, through the
    # proxy where the workflow is an agent class.
    for present in ("role 'rollout'", "role 'data"):
        assert present in dump_log, present
    # The examples pass an eval workflow but set no evaluator frequency: the
    # dump starts no idle eval-rollout worker, and says so.
    assert "AReaL's eval-rollout worker is not started" in dump_log
    assert "role 'eval" not in dump_log
    assert ("role 'proxy-rollout'" in dump_log) is example.proxy
    assert ("Initializing proxy workers" in dump_log) is example.proxy
    reader = RecordingReader(
        recording_dir(str(gsm8k_workdir), example.experiment, "trial0")
    )
    assert reader.manifest.areal_version == installed_areal_version()
    assert reader.manifest.areal_build == installed_areal_build()
    assert reader.available_steps() == list(range(STEPS))
    for step in range(STEPS):
        batch = reader.load_shard(step, 0)
        assert len(batch) == example.trajectories
        for traj in batch:
            low, high = example.rows
            assert low <= traj["input_ids"].shape[0] <= high
            for reward in traj["rewards"].flatten().tolist():
                assert min(abs(reward - r) for r in example.rewards) < 1e-6, reward
            assert traj["loss_mask"].sum() > 0


def test_replay_is_bitwise_with_no_server_proxy_or_rollout_worker(
    gsm8k_workdir, example, dump_log
):
    rc, log = run_script(
        gsm8k_workdir,
        example.script,
        example.config,
        f"replay-{example.experiment}",
        REPLAY,
    )
    assert rc == 0, log[-4000:]
    # Only the actor's worker: the dump's log has the others (asserted above).
    assert "Creating 1 workers for role 'actor'" in log
    started = ["role 'rollout'", "role 'data"]
    if example.proxy:
        started += ["role 'proxy", "Initializing proxy workers"]
    assert_only_in_dump(dump_log, log, started)
    report = replay_report(str(gsm8k_workdir), example.experiment, "trial0_replay")
    assert_identical(report)
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        assert len(entry["metrics"]) > 90
