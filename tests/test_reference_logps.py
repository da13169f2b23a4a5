# SPDX-License-Identifier: Apache-2.0
"""The reference's log-probs kept in the dump (debug.record_ref_logp) and, when
asked, used in the replay instead of its forward pass
(debug.replay_recorded_ref_logp): the stand-in and the errors a person sees.

Real runs: SPMD in ``test_example_script_launcher.py`` (the gsm8k script with a
reference under a KL penalty), single-controller in ``test_example_scripts.py``.
"""

from __future__ import annotations

import pytest
import torch

from areal_debug.config import DebugConfig
from areal_debug.recording.format import RecordingError
from areal_debug.stages.recorded_ref_logp import RecordedRefLogp, ref_logp_tensors


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
    assert DebugConfig(record_ref_logp=True).kept_stage_tensors() == {
        "ref_logp",
        "logp",
    }
    assert DebugConfig(record_trainer_logp=False).kept_stage_tensors() == set()
    with pytest.raises(ValueError, match="debug.stage_digests=true"):
        DebugConfig(replay_recorded_ref_logp=True, stage_digests=False)
