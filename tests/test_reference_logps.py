# SPDX-License-Identifier: Apache-2.0
"""A reference model under a KL penalty, in SPMD mode: its log-probs digested as a
stage, kept in the dump (debug.record_ref_logp) and, when asked, used in the
replay instead of the reference's forward pass (debug.replay_recorded_ref_logp).

The single-controller form (reference in the RPC workers) is in
``test_example_scripts.py``; the errors a person sees are unit-tested here.
"""

from __future__ import annotations

import pytest
import torch
from support.harness import recording_dir, replay_report, run_torchrun

from areal_debug.config import DebugConfig
from areal_debug.recording.format import RecordingError
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.recorded_ref_logp import RecordedRefLogp, ref_logp_tensors

STEPS = 2
# The fake-engine YAML has no reference model: one colocated with the actor.
WITH_REF = [
    "actor.kl_ctl=0.1",
    "+ref={backend:${actor.backend},path:${actor.path},"
    "experiment_name:${experiment_name},trial_name:${trial_name},dtype:float32,"
    "attn_impl:sdpa,disable_dropout:true,init_from_scratch:false,optimizer:null,"
    "mb_spec:{max_tokens_per_mb:4096}}",
    f"total_train_steps={STEPS}",
]


@pytest.mark.areal
def test_replay_with_recorded_reference_logps_runs_no_reference_forward(workdir):
    d = str(workdir)
    dump = run_torchrun(
        d,
        "dump",
        1,
        [*WITH_REF, "debug.dump_rollout_data=true", "debug.record_ref_logp=true"],
    )
    assert dump.returncode == 0, dump.log[-3000:]
    reader = RecordingReader(recording_dir(d))
    stages, tensors = reader.recorded_stages(0)
    assert "ref_logp" in stages["ranks"][0]
    kept = ref_logp_tensors(tensors)
    # Only the reference log-probs, and beside each the tokens it was computed for.
    assert kept and set(tensors) == set(kept) | {f"{k} tokens" for k in kept}
    assert len(kept) == len(stages["ranks"][0]["ref_logp"])
    # Log-probs, one row per sequence of the trajectory group (n_samples 4).
    assert all(t.shape[0] == 4 and bool((t <= 0).all()) for t in kept.values())

    replay = run_torchrun(
        d,
        "replay",
        1,
        [
            *WITH_REF,
            "debug.replay_rollout_data=true",
            "debug.replay_recorded_ref_logp=true",
        ],
    )
    assert replay.returncode == 0, replay.log[-3000:]
    assert "reference forward passes run: 0." in replay.log
    report = replay_report(d)
    assert report["summary"]["all_identical"] is True, report["first_divergence"]
    for entry in report["steps"]:
        assert {s["status"] for s in entry["stages"].values()} == {"identical"}
        ref = entry["stages"]["ref_logp"]
        assert ref["source"] == "recorded" and ref["reference_forwards"] == 0
    # The dump's reference did run: the same counter saw it there.
    assert "ppo_actor/kl_rewards/avg" in dump.stats_by_step()[0]


def traj(rows: int, cols: int) -> dict:
    return {"input_ids": torch.zeros(rows, cols, dtype=torch.long)}


def test_recorded_reference_logps_stand_in_for_the_forward_pass():
    ref = RecordedRefLogp(rank=1)
    recorded = {
        "rank 0/ref_logp/trajectory 0": torch.full((4, 3), -1.0),
        "rank 1/ref_logp/trajectory 0": torch.full((4, 5), -2.0),
        "rank 1/ref_logp/trajectory 1": torch.full((4, 6), -3.0),
    }

    def forward(data):
        raise AssertionError("the reference forward ran")

    compute = ref.stand_in(forward)
    ref.hand_over(3, recorded)
    out = compute([traj(4, 5), traj(4, 6)])
    assert [t[0, 0].item() for t in out] == [-2.0, -3.0]
    # Handed over once per step: a second call in the step is refused.
    with pytest.raises(RecordingError, match="no recorded ones were handed over"):
        compute([traj(4, 5), traj(4, 6)])


def test_recorded_reference_logps_refuse_another_layout_or_a_gap():
    ref = RecordedRefLogp(rank=0)
    compute = ref.stand_in(lambda data: None)
    ref.hand_over(2, {"rank 0/ref_logp/trajectory 0": torch.zeros(4, 3)})
    with pytest.raises(RecordingError, match="data-parallel layout differs"):
        compute([traj(4, 3), traj(4, 3)])
    with pytest.raises(RecordingError, match="debug.record_ref_logp=true"):
        ref.hand_over(2, {"rank 1/ref_logp/trajectory 0": torch.zeros(4, 3)})


def test_a_malformed_stage_tensor_key_in_the_recording_is_named():
    recorded = {"rank 0/ref_logp/trajectory 0": torch.zeros(4, 3), "rank x/logp": 0}
    with pytest.raises(RecordingError, match="malformed key: 'rank x/logp'"):
        ref_logp_tensors(recorded)
    with pytest.raises(RecordingError, match="malformed key: 'rank x/logp'"):
        RecordedRefLogp(rank=0).hand_over(1, recorded)


class FakeRef:
    """The reference engine's surface the probes wrap."""

    def __init__(self):
        self.forwards = 0

    def forward(self, data):
        self.forwards += 1
        return torch.zeros(4, 3)

    def compute_logp(self, data):
        return [self.forward(traj) for traj in data]


def test_the_reference_probe_digests_the_recorded_logps_and_counts_no_forward():
    from areal_debug.areal_compat import MethodPatches
    from areal_debug.stages.probes import StageProbes

    ref = RecordedRefLogp(rank=0)
    probes = StageProbes(frozenset({"ref_logp"}), ref)
    engine, patches = FakeRef(), MethodPatches()
    probes.install_engine("ref", engine, patches)
    logps = torch.full((4, 3), -1.0)
    ref.hand_over(0, {"rank 0/ref_logp/trajectory 0": logps})
    assert torch.equal(engine.compute_logp([traj(4, 3)])[0], logps)
    record = probes.take()
    assert record.ref_forwards == 0 and engine.forwards == 0
    assert list(record.digests["ref_logp"]) == ["trajectory 0"]
    assert torch.equal(record.keyed_tensors(0)["rank 0/ref_logp/trajectory 0"], logps)
    # Without the stand-in the reference runs, and its forward passes are counted.
    patches.remove_all()
    probes = StageProbes()
    probes.install_engine("ref", engine, patches)
    engine.compute_logp([traj(4, 3), traj(4, 3)])
    assert probes.take().ref_forwards == 2


def test_recorded_reference_options_need_stage_digests():
    assert DebugConfig(record_ref_logp=True).kept_stage_tensors() == {"ref_logp"}
    with pytest.raises(ValueError, match="debug.stage_digests=true"):
        DebugConfig(replay_recorded_ref_logp=True, stage_digests=False)
