# SPDX-License-Identifier: Apache-2.0
"""Real write failures, in a process of their own: the recording stops, training goes on.

A stand-in training loop records steps through the real RecordingWriter while the
kernel refuses the writes: a per-file size limit (RLIMIT_FSIZE, any user) or a
full filesystem (a 1 MiB tmpfs, where mounting is allowed).
"""

import contextlib
import os
import subprocess
import sys
import textwrap

import pytest
from support.system_parts import missing_system_part

from areal_debug.recording.reader import RecordingReader

TESTS = os.path.dirname(os.path.abspath(__file__))

# Steps of incompressible payloads: 0-1 small, then large ones.
LOOP = """
import logging, resource, signal, sys, torch
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest
from test_store import manifest
{limit}
path = sys.argv[1]
write_manifest(path, manifest())
w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
for step in range(6):
    n = 1_000 if step < 2 else 100_000
    g = torch.Generator().manual_seed(step)
    w.submit_batch(step, [{{"logprobs": torch.rand(n, generator=g)}}])
    w.submit_stats(step, {{"loss": float(step)}})
    w.flush()
w.close()
print("trained 6 steps")
"""

FSIZE = """
# Writes past 64 KiB fail with EFBIG instead of killing the process (SIGXFSZ).
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
"""


def run_loop(path: str, limit: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOOP.format(limit=limit)), path],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS,
        env={**os.environ, "PYTHONPATH": TESTS, "OMP_NUM_THREADS": "1"},
    )


def assert_stopped_at_step_2(path: str, run, error: str) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    assert "trained 6 steps" in run.stdout  # training went on
    reader = RecordingReader(path)
    assert reader.available_steps() == [0, 1]
    (stop,) = reader.stopped()
    assert stop["step"] == 2 and error in stop["error"]
    log = run.stdout + run.stderr
    assert log.count("areal-debug stopped recording at step 2") == 1
    # No temporary or half-written file is left anywhere in the recording.
    leftovers = [
        os.path.join(root, name)
        for root, _, files in os.walk(path)
        for name in files
        if name.startswith((".tmp-", ".reserved-"))
    ]
    assert leftovers == []
    assert not os.path.exists(os.path.join(path, "step-000003"))


def test_a_file_size_limit_stops_the_recording_mid_payload(tmp_path):
    path = str(tmp_path / "rec")
    run = run_loop(path, FSIZE)
    assert_stopped_at_step_2(path, run, "File too large")


@contextlib.contextmanager
def mounted_tmpfs(mnt, size: str):
    """A tmpfs of ``size`` at ``mnt``, unmounted on leaving; the test is skipped
    where mounting is not allowed (failed in CI: support.system_parts)."""
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        missing_system_part(
            "mounting a tmpfs needs root; the size-limit test covers the same path: "
            + mounted.stderr.strip()
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.fixture
def tiny_filesystem(tmp_path):
    with mounted_tmpfs(tmp_path / "tmpfs", "1m") as mnt:
        yield mnt


def test_a_full_filesystem_stops_the_recording_and_training_goes_on(tiny_filesystem):
    path = str(tiny_filesystem / "rec")
    # ~370 KiB stored per step from step 2 on: 1 MiB is full within three of them.
    run = run_loop(path)
    assert run.returncode == 0, run.stderr[-3000:]
    reader = RecordingReader(path)
    (stop,) = reader.stopped()
    assert "No space left on device" in stop["error"]
    assert reader.available_steps() == list(range(stop["step"]))
    assert "trained 6 steps" in run.stdout


def test_the_stop_marker_uses_reserved_space_when_nothing_else_fits(
    tmp_path, monkeypatch
):
    import errno

    from test_store import manifest, patch_writer, traj

    from areal_debug.recording.writer.recording_writer import RecordingWriter
    from areal_debug.recording.writer.start import write_manifest

    path = str(tmp_path)
    write_manifest(path, manifest())
    w = RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=10, writer_process=False
    )

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    patch_writer(monkeypatch, "save_payload", full)
    patch_writer(monkeypatch, "atomic_write_json", full)
    w.submit_batch(0, [traj(0)])
    w.close()
    (stop,) = RecordingReader(path).stopped()
    assert stop["step"] == 0 and "No space left" in stop["error"]


def test_in_a_read_only_directory_the_marker_stays_in_its_reservation(
    tmp_path, monkeypatch
):
    import errno
    import os

    from test_store import manifest, patch_writer, traj

    from areal_debug.recording.format import reserved_marker_name, stopped_marker_name
    from areal_debug.recording.writer.recording_writer import RecordingWriter
    from areal_debug.recording.writer.start import write_manifest

    path = str(tmp_path)
    write_manifest(path, manifest())
    w = RecordingWriter(
        path, shard=0, num_shards=1, steps_per_epoch=10, writer_process=False
    )

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    # A directory that takes no new names: no file created, none renamed, none
    # removed; the reservation made at start is still writable.
    patch_writer(monkeypatch, "save_payload", denied)
    patch_writer(monkeypatch, "atomic_write_json", denied)
    monkeypatch.setattr(os, "replace", denied)
    monkeypatch.setattr(os, "unlink", denied)
    w.submit_batch(0, [traj(0)])
    w.close()
    monkeypatch.undo()
    assert not os.path.exists(tmp_path / stopped_marker_name(0))
    (stop,) = RecordingReader(path).stopped()
    assert stop["step"] == 0 and "Permission denied" in stop["error"]
    # A later run (the directory writable again) gives the marker its own name
    # before reserving space anew, so it is not overwritten.
    RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10).close()
    assert (tmp_path / stopped_marker_name(0)).exists()
    assert not (tmp_path / reserved_marker_name(0)).exists()
    (stop,) = RecordingReader(path).stopped()
    assert stop["step"] == 0 and "Permission denied" in stop["error"]


@pytest.mark.areal
@pytest.mark.lifecycle
def test_a_full_disk_mid_run_leaves_areal_training_to_the_end(workdir, tmp_path):
    """AReaL's trainer under torchrun (fake inference engine) dumping 6 steps to a
    160 KiB filesystem: the disk fills part way (each step takes ~50 KiB there:
    payload, statistics, RNG states, stage digests), training runs every step,
    and the recording holds every step before the failure, whole, and says
    where, why and writing what it stopped."""
    from support.harness import run_torchrun

    with mounted_tmpfs(tmp_path / "small", "160k") as mnt:
        path = str(mnt / "rec")
        run = run_torchrun(
            str(workdir),
            "dump",
            1,
            [
                "total_train_steps=6",
                "debug.dump_rollout_data=true",
                f"debug.path={path}",
            ],
        )
        assert run.returncode == 0, run.log[-3000:]
        assert len(run.stats) == 6  # training went on to the end
        reader = RecordingReader(path)
        (stop,) = reader.stopped()
        assert "No space left on device" in stop["error"]
        assert 0 < stop["step"] < 6, stop
        # The failed step is kept when only a file after its batch failed.
        whole = stop["step"] + (stop["writing"] not in ("batch", "teacher"))
        assert reader.available_steps() == list(range(whole))
        for step in reader.available_steps():
            files, problems = reader.verify_step(step)
            assert problems == [] and files > 1
        for step in range(stop["step"]):
            assert reader.recorded_stats(step) and reader.recorded_stages(step)[0]
        assert (
            run.log.count(f"areal-debug stopped recording at step {stop['step']}") == 1
        )
