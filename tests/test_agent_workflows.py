# SPDX-License-Identifier: Apache-2.0
"""Agent-class and online workflows, recorded through AReaL's proxy and replayed.

- ``agent_rl.py`` (AReaL's ``examples/agent_workflow`` shape): an agent class
  behind AReaL's proxy (``rollout.agent.mode: inline``), against the CPU server.
- ``online_rl.py`` (``examples/openclaw`` shape): online mode, no dataset and no
  workflow; a client runs sessions through AReaL's proxy gateway while the dump
  trains, as an online user's agents would.

Each is dumped once and replayed with no server, proxy, gateway or rollout worker:
the replay must match the recording bit for bit.
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
from support.online_client import OnlineClient
from support.scripts import (
    AGENT_SEED,
    DUMP,
    REPLAY,
    env_for,
    processes_of,
    run_script,
)

from areal_debug.recording.reader import RecordingReader

pytestmark = [pytest.mark.areal, pytest.mark.scheduler(seed=AGENT_SEED)]

STEPS = 2
# The proxy listens on the host's address; AReaL refuses its default key there.
ADMIN_KEY = "areal-debug-cpu-test"


@dataclass(frozen=True)
class AgentRun:
    script: str
    config: str
    experiment: str
    online: bool
    trajectories: int  # per step, as the trainer receives them
    group: int  # samples per trajectory entry (gconfig.n_samples)


RUNS = {
    "agent-inline": AgentRun(
        "agent_rl.py", "gsm8k_agent_cpu.yaml", "gsm8k-agent", False, 8, 4
    ),
    "online": AgentRun("online_rl.py", "online_cpu.yaml", "gsm8k-online", True, 4, 1),
}


# online_rl.py is also AReaL 2.0.0's examples/openclaw/train.py with the README's
# change (2.0 kept that script as it was): every supported release runs it.
@pytest.fixture(
    scope="module",
    params=[
        # The inline agent run is the online run's check made again in AReaL's
        # other agent mode: a variant (make test-long, which CI runs).
        pytest.param(name, marks=pytest.mark.each_areal)
        if run.online
        else pytest.param(name, marks=pytest.mark.variant)
        for name, run in sorted(RUNS.items())
    ],
)
def agent_run(request) -> AgentRun:
    return RUNS[request.param]


# Each run's dump, made once whatever order the tests run in (a pytest-xdist
# worker runs them in collection order, which would set a parametrized
# module fixture up again at every switch of parameter).
_DUMPS: dict[str, tuple | BaseException] = {}


@pytest.fixture
def agent_dump(agent_workdir, agent_run):
    key = agent_run.experiment
    if key not in _DUMPS:
        try:
            _DUMPS[key] = _dump(agent_workdir, agent_run)
        except BaseException as e:
            _DUMPS[key] = e  # a failed dump is not run again for the next test
            raise
    outcome = _DUMPS[key]
    if isinstance(outcome, BaseException):
        pytest.fail(f"the {key} dump failed in an earlier test: {outcome}")
    return outcome


def _dump(agent_workdir, agent_run):
    from areal_debug.testing import end_process, start_server

    server = client = None
    name = f"dump-{agent_run.experiment}"
    try:
        server, addr = start_server(agent_workdir, env_for(agent_workdir))
        if agent_run.online:
            client = OnlineClient(agent_workdir / f"{name}.log", ADMIN_KEY)
            client.start()
        rc, log = run_script(
            agent_workdir,
            agent_run.script,
            agent_run.config,
            name,
            DUMP,
            addr,
            seed=AGENT_SEED,
        )
    finally:
        if client is not None:
            client.close()
        if server is not None:
            end_process(server)
    assert processes_of(agent_workdir) == []
    assert rc == 0, log[-4000:]
    return log, client


def test_dump_records_what_the_proxy_exported(agent_workdir, agent_run, agent_dump):
    log, client = agent_dump
    # AReaL's proxy ran: the trajectories came through it.
    assert "Initializing proxy workers for AgentWorkflow support" in log
    assert "role 'proxy-rollout'" in log
    if agent_run.online:
        assert "Proxy gateway available at" in log
        # Every trajectory of both steps is a session the client finished.
        assert client.finished >= STEPS * agent_run.trajectories
    reader = RecordingReader(
        recording_dir(str(agent_workdir), agent_run.experiment, "trial0")
    )
    assert reader.available_steps() == list(range(STEPS))
    assert reader.manifest.config["rollout"]["agent"]["mode"] == (
        "online" if agent_run.online else "inline"
    )
    for step in range(STEPS):
        batch = reader.load_shard(step, 0)
        assert len(batch) == agent_run.trajectories
        for traj in batch:
            assert traj["input_ids"].shape[0] == agent_run.group
            # The rewards the agent (0 or 1) or the online client (0.5 or 1) set.
            rewards = set(traj["rewards"].flatten().tolist())
            assert rewards <= ({0.5, 1.0} if agent_run.online else {0.0, 1.0})
            assert traj["loss_mask"].sum() > 0


def test_replay_needs_no_proxy_gateway_or_server(agent_workdir, agent_run, agent_dump):
    rc, log = run_script(
        agent_workdir,
        agent_run.script,
        agent_run.config,
        f"replay-{agent_run.experiment}",
        REPLAY,
        seed=AGENT_SEED,
    )
    assert rc == 0, log[-4000:]
    assert "Creating 1 workers for role 'actor'" in log
    # Only the actor's workers: what AReaL logs as it starts the rollout side
    # and the proxy is in the dump's log, not the replay's.
    dump_log, _ = agent_dump
    started = ["role 'rollout'", "role 'proxy", "Initializing proxy workers"]
    started += ["Proxy gateway available"] if agent_run.online else []
    assert_only_in_dump(dump_log, log, started)
    if agent_run.online:
        assert "online mode (rollout.agent.mode=online): the recording stands in" in log
    report = replay_report(str(agent_workdir), agent_run.experiment, "trial0_replay")
    assert_identical(report)
    assert report["summary"]["steps"] == STEPS
    for entry in report["steps"]:
        assert len(entry["metrics"]) > 90
