# SPDX-License-Identifier: Apache-2.0
"""The reliability suite's crash and concurrency families on fixed seeds, small
(`make reliability` runs them in full and prints the table); the hostile
families run in tests/test_hostile_recordings.py."""

from __future__ import annotations

import pytest

from areal_debug.recording.format import RecordingError
from areal_debug.recording.lock import RecordingLock, writer_of
from areal_debug.recording.writer.start import sweep_leftovers
from reliability import concurrent, crash, full_disk, read_only


@pytest.mark.production_gc
def test_killed_and_resumed_dump_runs_keep_every_promise(tmp_path):
    kills, resumed = crash.run(str(tmp_path), chains=1, kills_per_chain=3, seed=0)
    assert kills.all_handled and resumed.all_handled, kills.failures + resumed.failures
    assert kills.tried >= 2 and resumed.tried == 1


def test_file_size_limits_stop_the_recording_not_the_training(tmp_path):
    tally = full_disk.run(str(tmp_path), 2, seed=0)
    assert tally.all_handled, tally.failures


def test_a_directory_made_read_only_mid_run_stops_the_recording_not_the_training(
    tmp_path,
):
    tally = read_only.run(str(tmp_path), 2, seed=0)
    assert tally.tried == 2 and tally.all_handled, tally.failures


def test_readers_and_a_second_run_beside_a_dump_run(tmp_path):
    tallies = concurrent.run(str(tmp_path), 8)
    for tally in tallies:
        assert tally.all_handled, tally.failures


def test_the_lock_names_its_holder_and_is_free_after_release(tmp_path):
    path = str(tmp_path / "rec")
    lock = RecordingLock.acquire(path, "exp/trial")
    holder = writer_of(path)
    assert holder["run"] == "exp/trial" and holder["pid"] > 0
    lock.release()
    assert writer_of(path) is None
    RecordingLock.acquire(path, "again").release()


def test_a_second_lock_in_another_process_is_refused(tmp_path):
    import multiprocessing

    path = str(tmp_path / "rec")
    lock = RecordingLock.acquire(path, "first/run")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        error = pool.apply(_try_lock, (path,))
    lock.release()
    assert "being recorded by another dump run (first/run, pid" in error


def _try_lock(path: str) -> str:
    try:
        RecordingLock.acquire(path, "second/run").release()
    except RecordingError as e:
        return str(e)
    return "acquired"


def test_leftovers_of_a_killed_run_are_swept_but_never_a_step(tmp_path):
    from reliability import recording

    path = str(tmp_path / "rec")
    recording.write(path)
    (tmp_path / "rec" / ".tmp-abc").write_bytes(b"half")
    (tmp_path / "rec" / "step-000000" / ".tmp-def").write_bytes(b"half")
    (tmp_path / "rec" / ".deleting-step-000009").mkdir()
    (tmp_path / "rec" / "recover" / "step-000004.partial").mkdir(parents=True)
    (tmp_path / "rec" / "step-000001" / ".tmp-being-rewritten").write_bytes(b"x")
    swept = sweep_leftovers(path, before_step=1)
    assert sorted(p.removeprefix(path + "/") for p in swept) == [
        ".deleting-step-000009",
        ".tmp-abc",
        "recover/step-000004.partial",
        "step-000000/.tmp-def",
    ]
    # Step 1 is recorded again by the resumed run: left to supersede_steps.
    assert (tmp_path / "rec" / "step-000001" / ".tmp-being-rewritten").exists()
    assert recording.read_everything(path).keys() == {0, 1}
