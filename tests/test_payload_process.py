# SPDX-License-Identifier: Apache-2.0
"""The writer process: same bytes as the writer thread, errors brought back, and
it ends with its parent."""

import errno
import json
import os
import signal
import site
import subprocess
import sys
import textwrap

import pytest
import torch
from support.waiting import wait_until
from support.writer_reporting_sys_path import REPORT_ENV

import areal_debug
from areal_debug.recording.format import RecordingError, shard_meta_name
from areal_debug.recording.packed_payload import pack, plan, unpack
from areal_debug.recording.reader import RecordingReader
from areal_debug.recording.writer import step_files
from areal_debug.recording.writer.payload_file import save_payload
from areal_debug.recording.writer.payload_rules import describe_packed
from areal_debug.recording.writer.process import client, memory, messages
from areal_debug.recording.writer.process.client import PayloadProcess
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest

TESTS = os.path.dirname(os.path.abspath(__file__))


def batch(n: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [
        {
            "input_ids": torch.randint(0, 150_000, (2, n), generator=g),
            "logprobs": -torch.rand(2, n, generator=g),
            "attention_mask": torch.ones(2, n, dtype=torch.bool),
            "versions": torch.full((2, n), 3, dtype=torch.int32),
            "loss_mask": torch.ones(2, n, dtype=torch.int32),
            "rewards": torch.rand(2, generator=g, dtype=torch.float64),
            "empty": torch.zeros(0),
        }
        for _ in range(4)
    ]


@pytest.fixture
def writer_process():
    process = PayloadProcess()
    yield process
    process.close()


def test_it_stores_the_same_bytes_as_the_writer_thread(tmp_path, writer_process):
    # A small payload, then one that needs a larger arena, then a small one.
    for i, n in enumerate([16, 4096, 8]):
        packed = pack(batch(n, seed=i))
        ours = tmp_path / f"process-{i}.pt.zst"
        stored, described = writer_process.store(str(ours), packed, "zstd", 1, True)
        torch.serialization.set_crc32_options(False)  # as the writer process saves
        try:
            theirs = save_payload(str(tmp_path / f"thread-{i}.pt.zst"), packed, "zstd")
        finally:
            torch.serialization.set_crc32_options(True)
        assert ours.read_bytes() == (tmp_path / f"thread-{i}.pt.zst").read_bytes()
        assert {**stored, "file": None} == {**theirs, "file": None}
        assert described == describe_packed(packed)
        assert described["num_tokens"] == 4 * 2 * n


def odd_tensors() -> dict:
    """Tensors whose memory does not hold their values in order."""
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "strided": x[:, ::2],
        "transposed": x.t(),
        "offset": x[1:3],
        "negative": torch._neg_view(x[0]),
        "empty": torch.zeros(0, 3),
    }


def test_reading_training_memory_stores_the_same_bytes_as_shared_memory(
    tmp_path, writer_process
):
    # Odd layouts, and more tensors than one process_vm_readv call takes.
    many = [{"t": torch.full((3,), i, dtype=torch.int32)} for i in range(2500)]
    # zstd's worker threads (the default) or none.
    for i, value in enumerate([batch(64), [odd_tensors()], many]):
        shared = tmp_path / f"shared-{i}.pt.zst"
        read = tmp_path / f"read-{i}.pt.zst"
        threads = 2 * (i % 2)
        a = writer_process.store(str(shared), pack(value), "zstd", 1, i == 0, threads)
        b = writer_process.store_plan(
            str(read), plan(value), "zstd", 1, i == 0, threads
        )
        assert read.read_bytes() == shared.read_bytes()
        assert {**a[0], "file": None} == {**b[0], "file": None} and a[1] == b[1]
    assert writer_process.reads_memory
    # Both ways store the values, not the memory under them.
    (back,) = unpack(pack([odd_tensors()]))
    for k, v in odd_tensors().items():
        assert torch.equal(back[k], v), k


def test_the_writer_process_writes_the_shard_metadata_the_thread_would(
    tmp_path, monkeypatch
):
    # The JSON files this process writes: the shard's metadata is not one of
    # them where the writer process stores the payload, nor step.json where that
    # shard makes the step whole (one head, no teacher log-probs) and no copy is
    # left to confirm (clone_tensors=False: the accelerator's path). A copy still
    # to confirm (the CPU path's) is confirmed here before step.json is written.
    written = []
    real = step_files.atomic_write_json

    def recording_write(path, obj):
        written.append(os.path.basename(path))
        real(path, obj)

    for module in (step_files, messages):
        monkeypatch.setattr(module, "atomic_write_json", recording_write)
    metas, steps = {}, {}
    for use_process in (True, False):
        for clone in (False, True):
            path = str(tmp_path / f"process-{use_process}-{clone}")
            write_manifest(path, manifest())
            w = RecordingWriter(
                path,
                shard=0,
                num_shards=1,
                steps_per_epoch=10,
                writer_process=use_process,
                clone_tensors=clone,
            )
            w.submit_batch(0, batch(8))
            w.close()
            assert w._payloads.process is None or use_process
            reader = RecordingReader(path)
            metas[use_process, clone] = reader.step_meta(0).shards[0].to_json()
            steps[use_process, clone] = reader.step_meta(0).to_json()
            here = [] if use_process else [shard_meta_name(0)]
            here += ["step.json"] if clone or not use_process else []
            assert written == here, (use_process, clone)
            written.clear()
    # The same metadata every way (the bytes differ: the writer process leaves
    # the zip's CRC32 out, the sha256 covers them).
    differ = {"sha256", "bytes"}
    for key in metas:
        assert {k: v for k, v in metas[key].items() if k not in differ} == {
            k: v for k, v in metas[False, False].items() if k not in differ
        }
        shards = steps[key].pop("shards")
        assert steps[key] == {
            k: v for k, v in steps[False, False].items() if k != "shards"
        }, key
        assert len(shards) == 1
    assert metas[True, False]["shard"] == 0
    assert metas[True, False]["num_trajectories"] == 4
    assert steps[True, False]["num_trajectories"] == 4


def test_where_memory_may_not_be_read_payloads_go_through_shared_memory(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", TESTS)
    monkeypatch.setattr(client, "CHILD_MODULE", "support.writer_without_memory_reads")
    process = PayloadProcess()
    monkeypatch.setattr(client, "shared", lambda: process)
    path = str(tmp_path)
    write_manifest(path, manifest())
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    try:
        for step in range(2):
            w.submit_batch(step, batch(8, seed=step))
        w.close()
    finally:
        process.close()
    assert w._payloads.process is process and not process.reads_memory
    reader = RecordingReader(path)
    assert reader.available_steps() == [0, 1]
    for step in range(2):
        assert_same(reader.load_shard(step, 0), batch(8, seed=step))


def assert_same(loaded: list[dict], expected: list[dict]) -> None:
    assert len(loaded) == len(expected)
    for a, b in zip(loaded, expected, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_its_errors_come_back_with_their_errno_and_it_serves_on(
    tmp_path, writer_process
):
    (tmp_path / "a-dir").mkdir()
    packed = pack(batch(8))
    with pytest.raises(IsADirectoryError) as e:  # the rename into place fails
        writer_process.store(str(tmp_path / "a-dir"), packed, "zstd", 1, False)
    assert e.value.errno == errno.EISDIR
    assert os.listdir(tmp_path / "a-dir") == [] and len(os.listdir(tmp_path)) == 1
    stored, _ = writer_process.store(str(tmp_path / "x.pt"), packed, "zstd", 1, False)
    assert stored["bytes"] == (tmp_path / "x.pt").stat().st_size


PARENT = """
import sys, time, torch
from areal_debug.recording.packed_payload import pack
from areal_debug.recording.writer.process.client import PayloadProcess
p = PayloadProcess()
p.store(sys.argv[1], pack([{"x": torch.arange(10)}]), "zstd", 1, False)
print(p._proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.production_gc
def test_it_ends_when_the_training_process_is_killed(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT), str(tmp_path / "x.pt")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait(timeout=30)
        wait_until(
            lambda: not _alive(child),
            30,
            "the writer process outlived its parent",
            interval=0.05,
        )
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def manifest() -> dict:
    sys.path.insert(0, TESTS)
    from test_store import manifest as store_manifest

    return store_manifest()


def test_a_writer_process_that_cannot_start_leaves_the_writer_thread_to_store(
    tmp_path, monkeypatch
):
    process = PayloadProcess()
    monkeypatch.setattr(client, "shared", lambda: process)
    monkeypatch.setattr(client, "CHILD_MODULE", "no_such_module_here")
    path = str(tmp_path)
    write_manifest(path, manifest())
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    w.submit_batch(0, batch(8))
    w.close()
    process.close()
    assert w._payloads.process is None  # fell back, once
    assert RecordingReader(path).available_steps() == [0]


@pytest.mark.production_gc
def test_a_writer_process_killed_mid_run_stops_the_recording_not_training(
    tmp_path, monkeypatch
):
    process = PayloadProcess()
    monkeypatch.setattr(client, "shared", lambda: process)
    path = str(tmp_path)
    write_manifest(path, manifest())
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    w.submit_batch(0, batch(8))
    w.flush()
    os.kill(process._proc.pid, signal.SIGKILL)
    w.submit_batch(1, batch(8))  # training goes on submitting
    w.flush()
    w.submit_batch(2, batch(8))
    w.close()
    process.close()
    reader = RecordingReader(path)
    assert reader.available_steps() == [0]
    (stop,) = reader.stopped()
    assert stop["step"] == 1 and "writer process exited" in stop["error"]
    assert isinstance(w.stopped[1], RecordingError)


@pytest.fixture
def yama_scope_1(tmp_path, monkeypatch) -> list[int]:
    """Yama's ptrace_scope 1 (this machine may have no Yama at all), with the
    prctl(PR_SET_PTRACER) calls recorded instead of made: the pids given, in order."""
    scope = tmp_path / "ptrace_scope"
    scope.write_text("1\n")
    monkeypatch.setattr(memory, "YAMA_SCOPE", str(scope))
    calls: list[int] = []

    def recorded(pid: int) -> bool:
        calls.append(pid)
        return True

    monkeypatch.setattr(memory, "_set_ptracer", recorded)
    return calls


def test_the_memory_reading_permission_ends_with_the_writer_process(
    tmp_path, yama_scope_1
):
    process = PayloadProcess()
    try:
        process.store(str(tmp_path / "x.pt"), pack(batch(8)), "zstd", 1, False)
        pid = process._proc.pid
        assert yama_scope_1 == [pid] and process.ptrace_grantee == pid
    finally:
        process.close()
    assert yama_scope_1 == [pid, 0] and process.ptrace_grantee is None


def test_the_memory_reading_permission_ends_when_the_writer_process_is_killed(
    tmp_path, yama_scope_1, monkeypatch
):
    process = PayloadProcess()
    try:
        process.store(str(tmp_path / "x.pt"), pack(batch(8)), "zstd", 1, False)
        pid = process._proc.pid
        # Killed after the store has found it running: the request finds it dead.
        real_request = process._request

        def killed_first(request, fd=None):
            os.kill(pid, signal.SIGKILL)
            return real_request(request, fd)

        monkeypatch.setattr(process, "_request", killed_first)
        with pytest.raises(RecordingError, match="writer process exited"):
            process.store(str(tmp_path / "y.pt"), pack(batch(8)), "zstd", 1, False)
        assert yama_scope_1 == [pid, 0] and process.ptrace_grantee is None
        # The next store starts another writer process, and names that one.
        monkeypatch.setattr(process, "_request", real_request)
        process.store(str(tmp_path / "z.pt"), pack(batch(8)), "zstd", 1, False)
        again = process._proc.pid
        assert yama_scope_1 == [pid, 0, again] and process.ptrace_grantee == again
    finally:
        process.close()
    assert yama_scope_1[-1] == 0 and process.ptrace_grantee is None


@pytest.mark.parametrize("installed", [False, True], ids=["checkout", "installed"])
def test_the_writer_process_imports_the_standard_library_first_and_this_package(
    tmp_path, monkeypatch, installed
):
    """Where this package was imported from is importable in the writer process
    without going ahead of the standard library; installed, that place is
    site-packages (here: the venv's, which finds this checkout)."""
    report = tmp_path / "sys-path.json"
    monkeypatch.setenv(REPORT_ENV, str(report))
    monkeypatch.setenv("PYTHONPATH", TESTS)
    monkeypatch.setattr(client, "CHILD_MODULE", "support.writer_reporting_sys_path")
    # Not the checkout: the current directory is on its sys.path ('' of -c).
    monkeypatch.chdir(tmp_path)
    root = site.getsitepackages()[0] if installed else client._package_root()
    monkeypatch.setattr(client, "_package_root", lambda: root)
    process = PayloadProcess()
    try:
        process.store(str(tmp_path / "x.pt"), pack(batch(8)), "zstd", 1, False)
    finally:
        process.close()
    child = json.loads(report.read_text())
    path = [os.path.abspath(p) for p in child["sys_path"]]
    stdlib = path.index(os.path.abspath(child["stdlib"]))
    site_packages = {os.path.abspath(p) for p in child["site_packages"]}
    sites = [i for i, p in enumerate(path) if p in site_packages]
    assert sites and all(stdlib < i for i in sites), child["sys_path"]
    assert stdlib < path.index(root) <= min(sites), child["sys_path"]
    assert os.path.samefile(child["areal_debug"], areal_debug.__file__)
