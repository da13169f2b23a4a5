# SPDX-License-Identifier: Apache-2.0
"""The gsm8k-shaped script through areal-debug's SPMD launcher, as AReaL's
examples are launched (``python -m areal.infra.launcher.local script.py``).

Its YAML leaves ``allocation_mode`` empty (backends per engine, every 1.0.4
example): the launcher derives the dump's allocation from them, starts no server
when ``AREAL_LLM_SERVER_ADDRS`` names a running one and passes the addresses on,
and derives the replay's from the training engine alone. The YAML is the one
with a critic and a reference model under a KL penalty (``gsm8k_ppo.yaml``
shape), so the run covers those models in SPMD mode too.
"""

from __future__ import annotations

import sys

import pytest
from support.harness import recording_dir, replay_report, run_logged
from support.scripts import env_for, processes_of, script_path
from support.workdirs import make_workdir

from areal_debug.recording.reader import RecordingReader

# test_example_scripts.py's critic and reference models made again in SPMD mode,
# through the launcher (whose plans test_launcher.py checks without running them):
# a variant (make test-long, which CI runs).
pytestmark = [pytest.mark.areal, pytest.mark.variant]

EXPERIMENT = "gsm8k-ppo"
STEPS = 2


def launch(workdir, name: str, overrides: list[str], server: str | None = None):
    cmd = [
        sys.executable,
        "-m",
        "areal_debug.launcher.local",
        script_path("gsm8k_rl.py"),
        "--config",
        script_path("gsm8k_ppo_cpu.yaml"),
        *overrides,
    ]
    rc, log = run_logged(cmd, str(workdir), name, env_for(workdir, server), 900)
    left = [p for p in processes_of(workdir) if "tooling.cpu_server" not in p]
    assert left == [], f"{name} left processes behind: {left}"
    return rc, log


@pytest.fixture(scope="module")
def gsm8k_spmd(tiny_assets, tmp_path_factory):
    """The script's dump through the launcher against the CPU server, with the
    reference's log-probs kept (debug.record_ref_logp)."""
    from areal_debug.testing import end_process, start_server

    workdir = tmp_path_factory.mktemp("gsm8k_spmd")
    make_workdir(workdir, tiny_assets, data="gsm8k")
    server, addr = start_server(workdir, env_for(workdir))
    try:
        rc, log = launch(
            workdir,
            "dump",
            [
                "debug.dump_rollout_data=true",
                "debug.deterministic=true",
                "debug.record_ref_logp=true",
            ],
            addr,
        )
    finally:
        end_process(server)
    assert rc == 0, log[-4000:]
    return workdir, log


def test_gsm8k_script_records_through_the_spmd_launcher(gsm8k_spmd):
    from areal_debug.stages.recorded_ref_logp import ref_logp_tensors

    workdir, log = gsm8k_spmd
    assert "from rollout.backend and actor.backend" in log
    assert "no server is started" in log
    assert "ScriptTrainer.train (export_style=concat)" in log
    # The reference ran: the KL penalty is in the dump's statistics.
    assert "ppo_actor/kl_rewards/avg" in log
    reader = RecordingReader(recording_dir(str(workdir), EXPERIMENT, "trial0"))
    assert reader.manifest.layout.mode == "spmd"
    assert reader.available_steps() == list(range(STEPS))
    stages, tensors = reader.recorded_stages(0)
    assert {"ref_logp", "values"} <= set(stages["ranks"][0])
    kept = ref_logp_tensors(tensors)
    # The reference log-probs and the actor's recomputed ones (kept by default,
    # debug.record_trainer_logp), beside each the tokens it was computed for.
    actor = {k.replace("/ref_logp/", "/logp/"): t for k, t in kept.items()}
    both = set(kept) | set(actor)
    assert kept and set(tensors) == both | {f"{k} tokens" for k in both}
    assert len(kept) == len(stages["ranks"][0]["ref_logp"])
    # Log-probs, one row per sequence of the trajectory group (n_samples 4).
    assert all(t.shape[0] == 4 and bool((t <= 0).all()) for t in kept.values())


def test_replay_through_the_launcher_is_bitwise_with_the_reference_computed(
    gsm8k_spmd,
):
    """The script's replay through the launcher, as a user replays by default:
    no server, the critic's values and the reference's log-probs computed again
    by their models, every stage identical. (The reference's log-probs read from
    the recording instead: single-controller mode, test_example_scripts.py.)"""
    workdir, _ = gsm8k_spmd
    rc, log = launch(
        workdir,
        "replay",
        [
            "debug.replay_rollout_data=true",
            "debug.deterministic=true",
            "debug.replay_trial_name=replay",
        ],
    )
    assert rc == 0, log[-4000:]
    assert "Replay engine in place of the inference engine" in log
    report = replay_report(str(workdir), EXPERIMENT, "replay")
    assert report["summary"]["steps"] == STEPS
    assert report["summary"]["all_identical"] is True, report["first_divergence"]
    for entry in report["steps"]:
        assert {s["status"] for s in entry["stages"].values()} == {"identical"}
        assert {"values", "ref_logp", "weights"} <= set(entry["stages"])
        # The reference model ran (one forward per trajectory group).
        ref = entry["stages"]["ref_logp"]
        assert ref["source"] == "computed" and ref["reference_forwards"] > 0
