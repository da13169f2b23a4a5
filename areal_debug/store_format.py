# SPDX-License-Identifier: Apache-2.0
"""On-disk format of a recording (v2; v1 still read): names, atomic writes, codecs,
what a payload may hold.

Layout (see docs/format.md)::

    <path>/manifest.json                    written once by global rank 0
    <path>/dump.lock                        locked by the dump run writing it
    <path>/step-000007/shard-00000.pt.zst   one payload per data-parallel head
    <path>/step-000007/shard-00000.json     that payload's codec, sizes, sha256, counts
    <path>/step-000007/step.json            written last: the step exists
    <path>/step-000007/stats.json           statistics the trainer committed
    <path>/step-000007/teacher_logp.pt.zst  the teacher's log-probs (when it runs)
    <path>/step-000007/stages.json          digests of each stage of the PPO step
    <path>/step-000007/stage_tensors.pt     per-token stage tensors (when asked for)

A payload is a ``torch.save`` of plain containers and tensors, compressed as a
whole (codec ``zstd``) or not (``none``, and every v1 payload); its sha256 is over
the bytes on disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import torch
import zstandard

# v2: payloads may be compressed (shard metadata names the codec). v1 payloads are
# plain torch.save files and load unchanged: no migration step is needed.
FORMAT_VERSION = 2
SUPPORTED_FORMAT_VERSIONS = (1, 2)
CODECS = ("zstd", "none")
# zstd levels a dump may use: its fast levels (negative) and 1-22 (0 is not a level
# of its own: zstd reads it as 3). The default was chosen by measurement
# (benchmarks/compression.py, benchmarks/dump_overhead.py).
ZSTD_LEVELS = (-7, 22)
DEFAULT_ZSTD_LEVEL = 1
# zstd's own worker threads (0: compress on the calling thread). 2 by measurement
# (benchmarks/dump_overhead.py): the writer's background write of a 17 MiB step
# ~1.2x faster on 2 cores, the Python loop beside it no slower.
DEFAULT_ZSTD_THREADS = 2
MANIFEST = "manifest.json"
STEP_META = "step.json"
STATS = "stats.json"
RNG = "rng.pt"
TEACHER_LOGP_META = "teacher_logp.json"
ANOMALY = "anomaly.json"
STAGES_FILE = "stages.json"
STAGE_TENSORS = "stage_tensors.pt"
# An atomic write's file until it is renamed into place.
TEMPORARY_PREFIX = ".tmp-"
# Held (flock) by the dump run writing the recording; names it.
LOCK_FILE = "dump.lock"


class RecordingError(RuntimeError):
    """A recording is missing, incomplete, corrupt or unsafe to load."""


def step_dirname(global_step: int) -> str:
    return f"step-{global_step:06d}"


def parse_step_dirname(name: str) -> int | None:
    """The global step of a ``step-NNNNNN`` directory name, else None."""
    if not name.startswith("step-"):
        return None
    try:
        return int(name.removeprefix("step-"))
    except ValueError:
        return None


def list_step_dirs(path: str) -> dict[int, str]:
    """{global step: directory} of every step directory in a recording."""
    out = {}
    for name in os.listdir(path):
        step = parse_step_dirname(name)
        if step is not None:
            out[step] = os.path.join(path, name)
    return dict(sorted(out.items()))


# Recover checkpoints kept with a recording (areal_debug/checkpoints.py).
KEPT = "recover"


def kept_steps(recording: str) -> list[int]:
    """Steps whose recover checkpoint is kept with the recording."""
    root = os.path.join(recording, KEPT)
    return list(list_step_dirs(root)) if os.path.isdir(root) else []


def dir_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (files vanishing meanwhile count 0)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def payload_suffix(codec: str) -> str:
    return ".pt.zst" if codec == "zstd" else ".pt"


def complete_step_dirs(path: str) -> dict[int, str]:
    """{global step: directory} of the steps whose step.json exists."""
    return {
        step: d
        for step, d in list_step_dirs(path).items()
        if os.path.exists(os.path.join(d, STEP_META))
    }


def shard_payload_name(shard: int, codec: str = "none") -> str:
    return f"shard-{shard:05d}{payload_suffix(codec)}"


def stopped_marker_name(shard: int) -> str:
    """Why and where a head's writer stopped (written when recording fails)."""
    return f"stopped-shard-{shard:05d}.json"


# What a head was writing when it stopped (a stop marker's "writing"), in words.
STOPPED_WRITING = {
    "batch": "its batch",
    "teacher": "the teacher's log-probs",
    "rng": "its RNG states (rng.pt)",
    "stages": "its stage digests (stages.json)",
    "stats": "its statistics (stats.json)",
    "pin": "its anomaly pin (anomaly.json)",
}


def stop_consequence(marker: dict[str, Any], step_complete: bool) -> str:
    """What a stop marker means for replays, in words. A head stops where a write
    fails; when that was a file written after the step's batch (its statistics,
    RNG states, stage digests), the step is complete (``step_complete``: its
    step.json exists) and replays without that file."""
    step, writing = marker.get("step"), marker.get("writing")
    if not step_complete:
        return (
            f"steps before {step} are complete; step {step} and later are not recorded"
        )
    what = (
        STOPPED_WRITING.get(writing, f"its {writing[:40]}")
        if isinstance(writing, str)
        else "a file that failed"
    )
    return (
        f"steps up to {step} are complete, step {step} without {what}; later steps "
        "are not recorded"
    )


def reserved_marker_name(shard: int) -> str:
    """Space each head reserves for its stop marker, where the marker stays when
    the directory no longer takes new names."""
    return f".reserved-{stopped_marker_name(shard)}"


def reserved_marker(path: str) -> Any | None:
    """The stop marker written into a reservation, None while it holds only the
    blanks reserved (or is missing). A marker cut short (the writer ended while
    writing it) still says that the head stopped."""
    try:
        with open_regular(path, "rb") as f:
            data = f.read(1 << 16)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise RecordingError(
            f"Cannot read the reserved stop marker {path}: {e}."
        ) from e
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return {"error": f"the head stopped; its stop marker {path} is cut short"}


def teacher_payload_name(codec: str = "none") -> str:
    return f"teacher_logp{payload_suffix(codec)}"


def shard_meta_name(shard: int) -> str:
    return f"shard-{shard:05d}.json"


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_payload(raw: bytes | memoryview, codec: str, level: int) -> bytes:
    """The bytes to store for a ``torch.save`` output ``raw``, in one go."""
    if codec == "none":
        return raw
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)


class PayloadSink:
    """A file-like target for ``torch.save`` that encodes as it goes.

    ``torch.save`` writes its records straight into the codec and the file, so
    no whole uncompressed copy of the payload is ever built in memory (fresh
    memory costs a page fault per 4 KiB) and the compressor, the hash and the
    file write all run with the GIL released. The frame then does not carry
    its content size: the metadata's ``raw_bytes`` bounds the reader instead.
    """

    def __init__(
        self,
        file: BinaryIO,
        codec: str,
        level: int,
        check: Callable[[], None] | None = None,
        threads: int = 0,
    ):
        self.file = file
        # Called before each write: may raise to abandon the file.
        self.check = check
        self.codec = codec
        self.raw_bytes = 0
        self.bytes = 0
        self._sha = hashlib.sha256()
        self._pending = bytearray()
        self._encoder = (
            zstandard.ZstdCompressor(level=level, threads=threads).compressobj()
            if codec == "zstd"
            else None
        )

    # torch.save writes thousands of small records (headers, pickle pieces):
    # gathered up to this size, each costs one encoder call, not one each.
    CHUNK = 8 << 20

    def write(self, data) -> int:
        n = len(data)
        self.raw_bytes += n
        if n >= self.CHUNK:
            self._encode_pending()
            self._encode(data)
        else:
            self._pending += data
            if len(self._pending) >= self.CHUNK:
                self._encode_pending()
        return n

    def flush(self) -> None:
        """torch.save flushes at its end: nothing to do before finish()."""

    def finish(self) -> dict[str, Any]:
        """End the frame; the metadata a reader needs (codec, sizes, sha256)."""
        self._encode_pending()
        if self._encoder is not None:
            self._store(self._encoder.flush())
        return {
            "codec": self.codec,
            "bytes": self.bytes,
            "raw_bytes": self.raw_bytes,
            # Over the bytes on disk: a damaged file is caught before decoding it.
            "sha256": self._sha.hexdigest(),
        }

    def _encode_pending(self) -> None:
        if self._pending:
            self._encode(self._pending)
            self._pending = bytearray()

    def _encode(self, data) -> None:
        self._store(self._encoder.compress(data) if self._encoder else data)

    def _store(self, data) -> None:
        if self.check is not None:
            self.check()
        if data:
            self._sha.update(data)
            self.file.write(data)
            self.bytes += len(data)


def decode_payload(data: bytes, codec: str, raw_bytes: int | None, name: str) -> bytes:
    """The ``torch.save`` bytes of a stored payload; never more than ``raw_bytes``."""
    if codec == "none":
        return data
    if codec != "zstd":
        raise RecordingError(
            f"{name} uses codec {codec!r}, which this areal-debug does not read "
            f"(it reads {list(CODECS)}). Install the areal-debug version that wrote "
            "the recording, or a newer one."
        )
    if not isinstance(raw_bytes, int) or raw_bytes < 0:
        raise RecordingError(
            f"The metadata of {name} has no valid raw_bytes ({raw_bytes!r}); it is "
            "needed to decompress safely. Restore the metadata file or re-record."
        )
    declared = None
    try:
        # Checked before any memory is taken: a frame cannot inflate beyond what
        # the metadata promised. Streamed frames (PayloadSink) declare no size (-1);
        # max_output_size then bounds the output.
        declared = zstandard.frame_content_size(data)
        if declared not in (raw_bytes, -1):
            raise RecordingError(
                f"{name} declares {declared} uncompressed bytes, its metadata says "
                f"{raw_bytes}. Restore the file and its metadata, or re-record."
            )
        raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=raw_bytes)
    except zstandard.ZstdError as e:
        if declared == -1 and "did not decompress full frame" in str(e):
            raise RecordingError(
                f"{name} inflates beyond the {raw_bytes} bytes its metadata says; "
                "decompression stopped there. Restore the file and its metadata, "
                "or re-record."
            ) from e
        raise RecordingError(
            f"Cannot decompress {name}: {e!r}. The file is damaged; restore it or "
            "re-record the step."
        ) from e
    except (MemoryError, OverflowError) as e:
        raise RecordingError(
            f"Cannot decompress {name}: its metadata says {raw_bytes} uncompressed "
            "bytes, more than this machine can hold. Restore the metadata file or "
            "re-record the step."
        ) from e
    if len(raw) != raw_bytes:
        raise RecordingError(
            f"{name} decompressed to {len(raw)} bytes, its metadata says "
            f"{raw_bytes}. Restore the file or re-record the step."
        )
    return raw


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[BinaryIO]:
    """A file to write ``path`` through: a temporary name in the same directory,
    fsynced and renamed into place when the block ends without an error.

    A reader sees either no file or the whole file, never a half-written one,
    even if the process dies mid-write.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def atomic_write_bytes(path: str, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_file``)."""
    with atomic_file(path) as f:
        f.write(data)


def _fsync_dir(directory: str) -> None:
    # Makes the rename itself durable; not every filesystem allows it.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: str, obj: Any) -> None:
    # Python floats serialise to their shortest exact repr: no precision lost.
    atomic_write_bytes(
        path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
    )


def open_regular(path: str, mode: str = "rb"):
    """``open(path)``, refused unless it is a regular file: a FIFO or device
    put in a recording's place must not block or flood a reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordingError(
                f"{path} is not a regular file (a device, pipe or directory is in "
                "its place); a recording holds only regular files. Restore it."
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def read_json(path: str, what: str) -> Any:
    try:
        with open_regular(path, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise RecordingError(
            f"Cannot read the {what} {path}: {e}. The file is damaged; re-record "
            "the run or restore the file from a copy."
        ) from e


# Plain values that torch.load(weights_only=True) reconstructs without running
# code. Anything else would need a pickle allowlist, which we refuse to grow.
_PLAIN_SCALARS = (type(None), bool, int, float, str)


def check_storable(value: Any, where: str) -> None:
    """Raise TypeError if ``value`` cannot round-trip through a weights_only load."""
    if isinstance(value, torch.Tensor) or isinstance(value, _PLAIN_SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_storable(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str | int):
                raise TypeError(
                    f"{where} has a key of type {type(k).__name__}; recordings keep "
                    "only str or int dict keys."
                )
            check_storable(item, f"{where}[{k!r}]")
        return
    raise TypeError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which "
        "a recording cannot store: payloads must load with "
        "torch.load(weights_only=True), so they hold only tensors, numbers, "
        "strings, None and lists/tuples/dicts of those. Convert the value in your "
        "workflow (e.g. numpy array -> torch.tensor) or drop the key."
    )


def describe_batch(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, keys and dtypes of one shard, for its metadata file.

    One flattening call per quantity, not a small op per trajectory: this runs
    beside training, for hundreds of trajectories a step, and every torch call
    takes the GIL back from a training thread that may hold it for a while.
    """
    keys: dict[str, str] = {}
    masks: list[torch.Tensor] = []
    versions: list[torch.Tensor] = []
    loss_masks: list[torch.Tensor] = []
    loose: list[torch.Tensor] = []  # versions without a matching loss_mask
    for traj in batch:
        for k, v in traj.items():
            if isinstance(v, torch.Tensor):
                keys.setdefault(k, str(v.dtype).removeprefix("torch."))
            else:
                keys.setdefault(k, type(v).__name__)
        mask = traj.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            masks.append(mask)
        v = traj.get("versions")
        if isinstance(v, torch.Tensor):
            # Only generated tokens carry a policy version: prompts hold -1 and
            # right-padding holds the pad value, so select by loss_mask.
            lm = traj.get("loss_mask")
            if isinstance(lm, torch.Tensor) and lm.shape == v.shape:
                versions.append(v)
                loss_masks.append(lm)
            else:
                loose.append(v)
    out: dict[str, Any] = {
        "num_trajectories": len(batch),
        "num_sequences": sum(int(m.shape[0]) if m.dim() > 1 else 1 for m in masks),
        "num_tokens": int(_flat(masks).count_nonzero()) if masks else 0,
        "keys": dict(sorted(keys.items())),
        "policy_version": None,
    }
    generated = []
    if versions:
        generated.append(_flat(versions)[_flat(loss_masks) != 0])
    if loose:
        flat = _flat(loose)
        generated.append(flat[flat >= 0])
    allv = torch.cat(generated) if generated else None
    if allv is not None and allv.numel():
        out["policy_version"] = [int(allv.min()), int(allv.max())]
    return out


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' elements in one 1-D tensor, in one call (one dtype)."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        tensors = [t.to(torch.int64) for t in tensors]
    return torch._C._nn.flatten_dense_tensors(tensors)
