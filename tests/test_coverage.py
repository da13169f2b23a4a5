# SPDX-License-Identifier: Apache-2.0
"""Coverage, measured (compare/coverage.py): what each kept step holds per rank,
read from the files the real writer wrote, and what it lacks, said by the
manifest's readers: inspect, ls and the page (the replay's verdict:
tests/test_seams.py)."""

from __future__ import annotations

import json

from test_store import manifest, traj

from areal_debug.cli import main
from areal_debug.compare.coverage import Gap, coverage
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest

DIGEST = {"trajectory 0": ["00ff", None]}


def _rank(*stages: str) -> dict:
    return {stage: DIGEST for stage in stages}


def _record_with_gaps(path: str) -> None:
    """Four steps of a two-rank run, as its writer stores them: step 2 without
    statistics; step 1's rank 1 without its advantages; step 3 without stage
    digests; the mismatch at steps 0 and 1 only; layers on rank 0 only at 0."""
    write_manifest(path, manifest(steps_per_epoch=4))
    writer = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=4)
    ranks = {
        0: [
            _rank("logp", "advantages", "loss", "layers"),
            _rank("logp", "advantages", "loss"),
        ],
        1: [_rank("logp", "advantages", "loss"), _rank("logp", "loss")],
        2: [_rank("logp", "advantages", "loss")] * 2,
    }
    for step in range(4):
        writer.submit_batch(step, [traj(step)])
        if step in ranks:
            glob = {"grads": DIGEST, "weights": DIGEST}
            if step == 0:
                glob["model"] = DIGEST
            writer.submit_stages(step, {"ranks": ranks[step], "global": glob})
        if step != 2:
            stats = {"loss": 1.0}
            if step < 2:
                stats["areal_debug/mismatch/n_tokens"] = 10.0
            writer.submit_stats(step, stats)
    writer.close()


def test_each_step_says_what_it_lacks_per_rank(tmp_path):
    path = str(tmp_path / "rec")
    _record_with_gaps(path)
    found = coverage(RecordingReader(path))
    assert [s.step for s in found.steps] == [0, 1, 2, 3]
    assert found.lines() == [
        "layer digests: not recorded at step 0 on rank 1",
        "stage digests (advantages): not recorded at step 1 on rank 1",
        "statistics: not recorded at step 2",
        "training-inference mismatch: not recorded at step 3",
        "stage digests: not recorded at step 3",
    ]
    assert [Gap.from_json(g.to_json()) for g in found.gaps] == found.gaps


def test_a_whole_recording_has_no_gap(tmp_path):
    path = str(tmp_path / "rec")
    write_manifest(path, manifest(steps_per_epoch=4))
    writer = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=4)
    for step in range(2):
        writer.submit_batch(step, [traj(step)])
        writer.submit_stages(step, {"ranks": [_rank("logp")], "global": {}})
        writer.submit_stats(step, {"loss": 1.0})
    writer.close()
    assert coverage(RecordingReader(path)).lines() == []


def test_inspect_ls_and_the_page_say_what_was_not_covered(tmp_path, capsys):
    path = str(tmp_path / "rec")
    _record_with_gaps(path)
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "coverage    statistics: not recorded at step 2" in out
    assert (
        "coverage    stage digests (advantages): not recorded at step 1 on rank 1"
        in out
    )

    assert main(["ls", path, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert "statistics: not recorded at step 2" in listed[0]["not_covered"]
    # A closed dump run's manifest holds them; ls reads them there.
    reader = RecordingReader(path)
    m = reader.manifest
    m.coverage = {"steps": [0, 1, 2, 3], "gaps": [Gap("statistics", (9,)).to_json()]}
    write_manifest(path, m)
    assert main(["ls", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["not_covered"] == [
        "statistics: not recorded at step 9"
    ]

    page = tmp_path / "page.html"
    assert main(["report", path, "-o", str(page)]) == 0
    assert "Coverage: statistics: not recorded at step 2." in page.read_text()
