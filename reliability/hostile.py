# SPDX-License-Identifier: Apache-2.0
"""Hostile and corrupt recordings, generated with hypothesis.

Each case copies a valid recording, damages one thing in it and reads it the
way a replay, ``areal-debug verify`` and ``areal-debug inspect`` do. Handled
means: the reads succeed with exactly the data written, or end in one
``RecordingError`` whose message names the file (the CLI exits non-zero with
one line, no traceback); no file outside the recording is opened (an audit
hook watches every ``open``) and no code from a file runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from areal_debug.cli import main as cli
from areal_debug.recording.codecs import sha256_bytes
from areal_debug.recording.format import (
    MANIFEST,
    RNG,
    STAGES_FILE,
    STATS,
    STEP_META,
    RecordingError,
    shard_meta_name,
    shard_payload_name,
    stage_tensors_name,
    step_dirname,
    stopped_marker_name,
    teacher_payload_name,
)
from areal_debug.recording.packed_payload import pack
from areal_debug.recording.writer.payload_file import save_payload
from reliability import recording
from reliability.tally import Tally

STEP0 = step_dirname(0)
JSON_FILES = (
    MANIFEST,
    f"{STEP0}/{STEP_META}",
    f"{STEP0}/{STATS}",
    f"{STEP0}/{STAGES_FILE}",
    f"{STEP0}/{shard_meta_name(0)}",
    stopped_marker_name(1),
)
# Every file a reader opens, and the step directory itself.
LINKABLE = (
    MANIFEST,
    STEP0,
    stopped_marker_name(1),
    *(
        f"{STEP0}/{name}"
        for name in (
            STEP_META,
            STATS,
            RNG,
            STAGES_FILE,
            stage_tensors_name("zstd"),
            shard_payload_name(0, "zstd"),
            shard_payload_name(1, "zstd"),
            teacher_payload_name("zstd"),
        )
    ),
)
ESCAPING_NAMES = (
    "../step-000001/shard-00000.pt.zst",
    "../../bait/shard-00000.pt.zst",
    "/etc/passwd",
    "..",
    ".",
    "",
    "sub/shard-00000.pt.zst",
    "shard\x00.pt",
)
DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([-1, 0, 1, 2, 3, 10**30, 2**63, 1 << 16, 1 << 17])
    | st.floats()
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


class Exploit:
    """A payload object whose unpickling would create ``marker``."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


class Watch:
    """Every path opened below ``bait`` while armed (a process-wide audit hook)."""

    armed: Watch | None = None
    installed = False

    def __init__(self, bait: str):
        self.bait = os.path.realpath(bait)
        self.opened: list[str] = []

    def __enter__(self) -> Watch:
        if not Watch.installed:
            sys.addaudithook(Watch._hook)
            Watch.installed = True
        Watch.armed = self
        return self

    def __exit__(self, *exc) -> None:
        Watch.armed = None

    @staticmethod
    def _hook(event: str, args: tuple) -> None:
        watch = Watch.armed
        if watch is None or event != "open" or not isinstance(args[0], str | bytes):
            return
        path = os.path.realpath(os.fsdecode(args[0]))
        if path.startswith(watch.bait + os.sep):
            watch.opened.append(path)


class Workspace:
    """A valid recording, bait files outside it, and a fresh copy per case."""

    def __init__(self, root: str):
        self.root = root
        self.base = os.path.join(root, "base")
        recording.write(self.base)
        # A stop marker too, as a head that stopped writes it.
        with open(os.path.join(self.base, stopped_marker_name(1)), "w") as f:
            json.dump({"shard": 1, "step": 2, "error": "OSError(28)", "time": "t"}, f)
        self.original = recording.read_everything(self.base)
        self.bait = os.path.join(root, "bait")
        shutil.copytree(self.base, self.bait)  # the same bytes, outside
        self.marker = os.path.join(root, "code-ran")

    @contextlib.contextmanager
    def copy(self):
        path = tempfile.mkdtemp(dir=self.root, prefix="case-")
        shutil.rmtree(path)
        shutil.copytree(self.base, path, symlinks=True)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def judge(self, path: str, expected: dict | None = None) -> str | None:
        """None if the damaged recording at ``path`` is handled, else what went wrong.

        ``expected``: {(step, shard): batch} written on purpose; other payloads
        must read back as originally recorded. ``False`` skips the comparison.
        """
        with Watch(self.bait) as watch:
            problem = self._read(path, expected)
            problem = problem or self._cli(path)
        if watch.opened:
            return f"opened a file outside the recording: {watch.opened[0]}"
        if os.path.exists(self.marker):
            return "code from the recording ran"
        return problem

    def _read(self, path: str, expected) -> str | None:
        self._error = None
        try:
            found = recording.read_everything(path)
        except RecordingError as e:
            self._error = e
            return None if path in str(e) else f"the error does not name a file: {e}"
        except Exception as e:  # noqa: BLE001 - exactly what the suite looks for
            return f"{type(e).__name__}: {e} at {_where(e)}"
        if expected is False:
            return None
        return self._altered(found, expected or {})

    def _altered(self, found: dict, expected: dict) -> str | None:
        """What was read back different from what was written (checksummed data;
        an optional part a damaged file no longer points to reads as None)."""
        for step, parts in found.items():
            original = self.original.get(step)
            if original is None:
                continue
            shards = [
                expected.get((step, s), b) for s, b in enumerate(original["shards"])
            ]
            want = {
                "shards": shards,
                "whole": [t for b in shards for t in b],
                "teacher": original["teacher"],
                "rng": original["rng"],
                "stage tensors": original["stages"][1],
            }
            got = {**parts, "stage tensors": parts["stages"][1]}
            for part, value in want.items():
                if got[part] is None and part != "shards":
                    continue
                if not recording.same(got[part], value):
                    return f"step {step} {part} read back altered, without an error"
        return None

    def _cli(self, path: str) -> str | None:
        for command in ("verify", "inspect"):
            out, err = io.StringIO(), io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    rc = cli([command, path])
            except Exception as e:  # noqa: BLE001
                return f"areal-debug {command} raised {type(e).__name__}: {e}"
            if self._error is not None and command == "verify" and rc == 0:
                return f"areal-debug verify exited 0 although reading failed: {self._error}"
        return None


def _where(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno}"


def _cases(tally: Tally, n: int, seed: int, case: Callable) -> None:
    """Run ``case(data)`` for ``n`` generated inputs; it reports to ``tally``."""

    @hypothesis_seed(seed)
    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def run(data) -> None:
        case(data)

    run()


# -- metadata ------------------------------------------------------------------------
def _draw_location(data, doc: Any) -> list:
    where: list = []
    while isinstance(doc, dict | list) and doc and data.draw(st.integers(0, 3)):
        key = data.draw(
            st.sampled_from(sorted(doc) if isinstance(doc, dict) else range(len(doc)))
        )
        where.append(key)
        doc = doc[key]
    return where


def _set(doc: Any, where: list, value: Any, delete: bool) -> Any:
    if not where:
        return value
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    if delete:
        del parent[where[-1]]
    else:
        parent[where[-1]] = value
    return doc


def metadata(ws: Workspace, n: int, seed: int) -> Tally:
    tally = Tally(
        "hostile metadata (JSON)",
        "RecordingError naming the file, or the data read back unaltered",
    )

    def case(data) -> None:
        name = data.draw(st.sampled_from(JSON_FILES))
        op = data.draw(
            st.sampled_from(
                ["delete", "replace", "replace", "truncate", "garbage", "nest"]
            )
        )
        with ws.copy() as path:
            file = os.path.join(path, name)
            with open(file, "rb") as f:
                raw = f.read()
            if op == "truncate":
                cut = data.draw(st.integers(0, max(0, len(raw) - 1)))
                new, label = raw[:cut], f"{name} truncated at byte {cut}"
            elif op == "garbage":
                new = data.draw(st.binary(max_size=64))
                label = f"{name} replaced by bytes {new!r}"
            elif op == "nest":
                depth = data.draw(st.sampled_from([100, 10_000, 200_000]))
                new, label = b"[" * depth + b"]" * depth, f"{name} nested {depth} deep"
            else:
                doc = json.loads(raw)
                where = _draw_location(data, doc)
                value = None if op == "delete" else data.draw(json_values)
                if op == "delete" and not where:
                    op, value = "replace", {}
                doc = _set(doc, where, value, op == "delete")
                new = json.dumps(doc).encode()
                label = f"{name}: {op} {where}" + (
                    "" if op == "delete" else f" = {value!r}"
                )
            with open(file, "wb") as f:
                f.write(new)
            tally.record(ws.judge(path), label)

    _cases(tally, n, seed, case)
    return tally


# -- names and links -------------------------------------------------------------------
def names_and_links(ws: Workspace, n: int, seed: int) -> Tally:
    tally = Tally(
        "escaping names and links",
        "refused; no file outside the recording opened",
    )
    bait = ws.bait

    def name_case(path: str, name: str, entry: str) -> None:
        meta_path = os.path.join(path, STEP0, STEP_META)
        with open(meta_path) as f:
            meta = json.load(f)
        if entry == "teacher_logp":
            meta["teacher_logp"]["file"] = name
        else:
            meta["shards"][0]["file"] = name
        with open(meta_path, "w") as f:
            json.dump(meta, f)

    fixed = [
        (
            f"{entry} file = {name!r}",
            lambda p, name=name, entry=entry: name_case(p, name, entry),
        )
        for name in (
            *ESCAPING_NAMES,
            os.path.join(bait, STEP0, shard_payload_name(0, "zstd")),
        )
        for entry in ("shards", "teacher_logp")
    ]
    for target in LINKABLE:
        fixed.append(
            (f"{target} is a symlink out", lambda p, t=target: _link_out(p, bait, t))
        )
        fixed.append((f"{target} is a FIFO", lambda p, t=target: _fifo(p, t)))
    fixed.append(("a payload links to its neighbour", _link_neighbour))
    for label, damage in fixed:
        with ws.copy() as path:
            damage(path)
            tally.record(ws.judge(path), label)

    def case(data) -> None:
        name = data.draw(
            st.text(min_size=0, max_size=24).filter(
                lambda s: "/" in s or ".." in s or s.startswith("\x00") or not s
            )
        )
        with ws.copy() as path:
            name_case(path, name, "shards")
            tally.record(ws.judge(path), f"shard file = {name!r}")

    _cases(tally, n, seed, case)
    return tally


def _link_out(path: str, bait: str, target: str) -> None:
    here = os.path.join(path, target)
    if os.path.isdir(here):
        shutil.rmtree(here)
    else:
        os.unlink(here)
    os.symlink(os.path.join(bait, target), here)


def _fifo(path: str, target: str) -> None:
    here = os.path.join(path, target)
    if os.path.isdir(here):
        return _fifo(path, f"{target}/{STEP_META}")
    os.unlink(here)
    os.mkfifo(here)


def _link_neighbour(path: str) -> None:
    step = os.path.join(path, STEP0)
    os.unlink(os.path.join(step, shard_payload_name(1, "zstd")))
    os.symlink(
        shard_payload_name(0, "zstd"), os.path.join(step, shard_payload_name(1, "zstd"))
    )


# -- payloads ----------------------------------------------------------------------------
def _tensor(data) -> torch.Tensor:
    dtype = data.draw(st.sampled_from(DTYPES))
    shape = data.draw(st.lists(st.integers(0, 7), max_size=3))
    return torch.zeros(shape, dtype=dtype)


def _hostile_batch(data, ws: Workspace) -> tuple[Any, str]:
    kind = data.draw(
        st.sampled_from(["container", "value", "value", "value", "exploit", "packed"])
    )
    batch = [dict(t) for t in ws.original[0]["shards"][0]]
    if kind == "container":
        value = data.draw(
            st.sampled_from([{}, (), 7, "batch", None, [1, 2], [[]], {"input_ids": 1}])
            | st.builds(
                lambda t: {"input_ids": t}, st.just(torch.zeros(2, dtype=torch.long))
            )
        )
        return value, f"payload is {value!r}"
    if kind == "exploit":
        return [Exploit(ws.marker)], "payload holds a pickled object"
    traj = data.draw(st.integers(0, len(batch) - 1))
    key = data.draw(st.sampled_from([*batch[traj], "prox_logp", 5, ("t",)]))
    choice = data.draw(st.sampled_from(["tensor", "tensor", "plain", "delete"]))
    if choice == "delete":
        batch[traj].pop(key, None)
        value = "(deleted)"
    else:
        value = _tensor(data) if choice == "tensor" else data.draw(json_values)
        batch[traj][key] = value
    label = f"trajectory {traj}[{key!r}] = {recording_kind(value)}"
    if kind == "packed":
        packed = pack(batch)
        row = data.draw(st.integers(0, packed["table"].shape[0] - 1))
        col = data.draw(st.integers(0, packed["table"].shape[1] - 1))
        packed["table"][row, col] = data.draw(
            st.sampled_from([-1, 0, 3, 1 << 40, 2**62])
        )
        return packed, f"{label}; packed table[{row}, {col}] changed"
    return batch, label


def recording_kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {list(value.shape)}"
    return repr(value)[:40]


def payloads(ws: Workspace, n: int, seed: int) -> Tally:
    tally = Tally(
        "hostile payloads",
        "RecordingError naming the file, no code run, or read back exactly",
    )

    def case(data) -> None:
        obj, label = _hostile_batch(data, ws)
        with ws.copy() as path:
            step_dir = os.path.join(path, STEP0)
            meta_path = os.path.join(step_dir, STEP_META)
            with open(meta_path) as f:
                meta = json.load(f)
            entry = meta["shards"][0]
            if data.draw(st.integers(0, 9)) == 0:
                garbage = data.draw(st.binary(min_size=1, max_size=256))
                stored = {
                    "file": entry["file"],
                    "codec": "zstd",
                    **_raw(step_dir, entry["file"], garbage),
                }
                label, expected = (
                    f"payload bytes {garbage[:16]!r}... with a valid checksum",
                    False,
                )
            else:
                stored = save_payload(
                    os.path.join(step_dir, entry["file"]), obj, "zstd"
                )
                expected = False if label.endswith("changed") else {(0, 0): obj}
            entry.update(stored)
            with open(meta_path, "w") as f:
                json.dump(meta, f)
            tally.record(ws.judge(path, expected), label)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(ws.marker)

    _cases(tally, n, seed, case)
    return tally


def _raw(step_dir: str, name: str, data: bytes) -> dict:
    with open(os.path.join(step_dir, name), "wb") as f:
        f.write(data)
    return {"bytes": len(data), "raw_bytes": 1 << 20, "sha256": sha256_bytes(data)}


FAMILIES = (metadata, names_and_links, payloads)


def run(root: str, n: int, seed: int = 0) -> list[Tally]:
    """Every hostile-recording family, ``n`` generated cases each."""
    ws = Workspace(root)
    return [family(ws, n, seed) for family in FAMILIES]
