# SPDX-License-Identifier: Apache-2.0
"""On-disk format of a recording (v2; v1 still read): names, atomic writes, codecs,
what a payload may hold.

Layout (see docs/format.md)::

    <path>/manifest.json                    written once by global rank 0
    <path>/step-000007/shard-00000.pt.zst   one payload per data-parallel head
    <path>/step-000007/shard-00000.json     that payload's codec, sizes, sha256, counts
    <path>/step-000007/step.json            written last: the step exists
    <path>/step-000007/stats.json           statistics the trainer committed
    <path>/step-000007/teacher_logp.pt.zst  the teacher's log-probs (when it runs)

A payload is a ``torch.save`` of plain containers and tensors, compressed as a
whole (codec ``zstd``) or not (``none``, and every v1 payload); its sha256 is over
the bytes on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

import torch
import zstandard

# v2: payloads may be compressed (shard metadata names the codec). v1 payloads are
# plain torch.save files and load unchanged: no migration step is needed.
FORMAT_VERSION = 2
SUPPORTED_FORMAT_VERSIONS = (1, 2)
CODECS = ("zstd", "none")
MANIFEST = "manifest.json"
STEP_META = "step.json"
STATS = "stats.json"
RNG = "rng.pt"
TEACHER_LOGP_META = "teacher_logp.json"
ANOMALY = "anomaly.json"


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


def teacher_payload_name(codec: str = "none") -> str:
    return f"teacher_logp{payload_suffix(codec)}"


def shard_meta_name(shard: int) -> str:
    return f"shard-{shard:05d}.json"


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_payload(raw: bytes | memoryview, codec: str, level: int) -> bytes:
    """The bytes to store for a ``torch.save`` output ``raw``."""
    if codec == "none":
        return raw
    # One frame with its content size, so a reader can bound the output.
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(raw)


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
    try:
        # Checked before any memory is taken: a frame cannot inflate beyond what
        # the metadata promised.
        declared = zstandard.frame_content_size(data)
        if declared != raw_bytes:
            raise RecordingError(
                f"{name} declares {declared} uncompressed bytes, its metadata says "
                f"{raw_bytes}. Restore the file and its metadata, or re-record."
            )
        raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=raw_bytes)
    except zstandard.ZstdError as e:
        raise RecordingError(
            f"Cannot decompress {name}: {e}. The file is damaged; restore it or "
            "re-record the step."
        ) from e
    if len(raw) != raw_bytes:
        raise RecordingError(
            f"{name} decompressed to {len(raw)} bytes, its metadata says "
            f"{raw_bytes}. Restore the file or re-record the step."
        )
    return raw


def atomic_write_bytes(path: str, data: bytes | memoryview) -> None:
    """Write to a temporary name in the same directory, fsync, then rename.

    A reader sees either no file or the whole file, never a half-written one,
    even if the process dies mid-write.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


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


def read_json(path: str, what: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
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
    """Counts, keys and dtypes of one shard, for its metadata file."""
    keys: dict[str, str] = {}
    n_seqs = 0
    n_tokens = 0
    versions: list[torch.Tensor] = []
    for traj in batch:
        for k, v in traj.items():
            if isinstance(v, torch.Tensor):
                keys.setdefault(k, str(v.dtype).removeprefix("torch."))
            else:
                keys.setdefault(k, type(v).__name__)
        mask = traj.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            n_seqs += int(mask.shape[0]) if mask.dim() > 1 else 1
            n_tokens += int(mask.sum().item())
        v = traj.get("versions")
        if isinstance(v, torch.Tensor):
            # Only generated tokens carry a policy version: prompts hold -1 and
            # right-padding holds the pad value, so select by loss_mask.
            lm = traj.get("loss_mask")
            if isinstance(lm, torch.Tensor) and lm.shape == v.shape:
                v = v[lm.bool()]
            else:
                v = v[v >= 0]
            if v.numel():
                versions.append(v)
    out: dict[str, Any] = {
        "num_trajectories": len(batch),
        "num_sequences": n_seqs,
        "num_tokens": n_tokens,
        "keys": dict(sorted(keys.items())),
        "policy_version": None,
    }
    if versions:
        allv = torch.cat([v.flatten() for v in versions])
        out["policy_version"] = [int(allv.min()), int(allv.max())]
    return out
