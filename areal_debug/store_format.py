# SPDX-License-Identifier: Apache-2.0
"""On-disk format v1 of a recording: names, atomic writes, what a payload may hold.

Layout (see docs/format.md)::

    <path>/manifest.json                  written once by global rank 0
    <path>/step-000007/shard-00000.pt     one payload per data-parallel head
    <path>/step-000007/shard-00000.json   that payload's size, sha256, counts
    <path>/step-000007/step.json          written last: the step exists
    <path>/step-000007/stats.json         statistics the trainer committed
    <path>/step-000007/teacher_logp.pt    the teacher's log-probs (when it runs)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

import torch

FORMAT_VERSION = 1
SUPPORTED_FORMAT_VERSIONS = (1,)
MANIFEST = "manifest.json"
STEP_META = "step.json"
STATS = "stats.json"
RNG = "rng.pt"
TEACHER_LOGP = "teacher_logp.pt"
TEACHER_LOGP_META = "teacher_logp.json"


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


def shard_payload_name(shard: int) -> str:
    return f"shard-{shard:05d}.pt"


def shard_meta_name(shard: int) -> str:
    return f"shard-{shard:05d}.json"


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


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
