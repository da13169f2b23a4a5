# SPDX-License-Identifier: Apache-2.0
"""Old recordings stay replayable: a version-1 recording, checked in as written by
areal-debug 0.1 (SPMD, the fake engine, the tiny model, 2 steps), is read and
replayed by this version, whose own recordings are version ``FORMAT_VERSION`` (3).

The statistics of the batch alone (counts, lengths, rewards: ``BATCH_PREFIXES``,
computed from the recorded trajectories before any forward pass) must come back
bit for bit: no CPU arithmetic of the model is in them. The statistics of the
model's arithmetic (log-probabilities, losses, gradients, ...) are compared with a
tolerance: the fixture was recorded on another machine, and CPU matrix kernels
differ in the last bits between CPUs (measured: one machine's replay differed from
it by at most a few 1e-5 relative, in 13 and 16 of the ~100 statistics; on
2026-11-27 this 2-vCPU VM's was identical in every one). 1e-4 relative keeps a
margin of a few times over the largest measured; any wrong, missing or reordered
trajectory exceeds it by orders of magnitude."""

import json
import shutil
from pathlib import Path

import pytest
from support.harness import recording_dir, replay_report, run_torchrun

from areal_debug.compare.statistics import OWN_PREFIX
from areal_debug.inspect.reproducer.recording_copy import BATCH_PREFIXES
from areal_debug.recording.format import FORMAT_VERSION
from areal_debug.recording.reader import RecordingReader

V1 = Path(__file__).parent / "fixtures" / "recording-v1"


def test_the_fixture_is_a_version_1_recording():
    manifest = json.loads((V1 / "manifest.json").read_text())
    assert manifest["format_version"] == 1 < FORMAT_VERSION
    step = json.loads((V1 / "step-000000" / "step.json").read_text())
    # Version-1 shard metadata has no codec: plain torch.save payloads.
    assert "codec" not in step["shards"][0] and step["shards"][0]["file"].endswith(
        ".pt"
    )
    reader = RecordingReader(str(V1))
    assert reader.available_steps() == [0, 1]
    assert reader.load_shard(1, 0)[0]["input_ids"].dtype.is_signed


@pytest.mark.areal
def test_a_version_1_recording_replays_to_its_statistics(workdir):
    shutil.copytree(V1, recording_dir(str(workdir)))
    run = run_torchrun(
        str(workdir),
        "replay-v1",
        1,
        ["debug.replay_rollout_data=true", "total_train_steps=2"],
    )
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(workdir))
    assert report["summary"]["steps"] == 2
    for entry in report["steps"]:
        metrics = entry["metrics"]
        assert len(metrics) > 90
        # What this version measures and areal-debug 0.1 did not (the mismatch):
        # replayed, not recorded, and the step still complete.
        new = {n for n, m in metrics.items() if m["status"] == "not_recorded"}
        assert new and all(n.startswith(OWN_PREFIX) for n in new), sorted(new)
        assert entry["status"] != "incomplete"
        batch = {n: m for n, m in metrics.items() if n.startswith(BATCH_PREFIXES)}
        model = {n: m for n, m in metrics.items() if n not in batch and n not in new}
        assert batch and model, sorted(metrics)
        for name, metric in batch.items():
            assert metric["status"] == "identical", (name, metric)
        for name, metric in model.items():
            if metric["status"] != "identical":
                close = metric["rel_diff"] < 1e-4 or metric["abs_diff"] < 1e-7
                assert close, (name, metric)
