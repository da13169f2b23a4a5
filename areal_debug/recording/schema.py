# SPDX-License-Identifier: Apache-2.0
"""What a valid recording file holds, checked before anything in it is used.

A recording may come from anywhere (a copy, a colleague, a damaged disk). Every
file a reader uses passes one of these checks first, so whatever is wrong with
it ends in one ``RecordingError`` naming the file and the problem, never in a
``KeyError`` deep inside a replay, and no name in a file can lead a reader to
a file outside the recording.
"""

from __future__ import annotations

import os
import re
from typing import Any

from areal_debug.recording.format import Codec, RecordingError

_SHA256 = re.compile(r"[0-9a-f]{64}")
# Per-token keys a trainer reads beside input_ids: each has its shape.
TOKEN_KEYS = ("attention_mask", "loss_mask", "logprobs", "versions", "prox_logp")


def invalid(
    path: str, what: str, problem: str, fix: str | None = None
) -> RecordingError:
    """The error for a file that exists but does not hold what it should."""
    return RecordingError(
        f"{path} is not valid {what}: {problem}. "
        + (
            fix
            or "The file was edited or damaged; restore it from a copy or re-record."
        )
    )


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def member(root: str, directory: str, name: Any, where: str) -> str:
    """The path of file ``name`` in ``directory``, a plain name that stays inside
    the recording ``root`` (after following symlinks); else ``RecordingError``."""
    if not (
        isinstance(name, str)
        and name
        and name not in (".", "..")
        and os.path.basename(name) == name
        and "\x00" not in name
    ):
        raise RecordingError(
            f"{where} names the file {name!r}, which is not a plain file name in "
            f"{directory}. A recording only refers to files beside its metadata; "
            "this one was edited or crafted. Re-record the step."
        )
    return inside(root, os.path.join(directory, name))


def inside(root: str, path: str) -> str:
    """``path`` if it resolves inside ``root``; a symlink out is refused."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise RecordingError(
            f"{path} leads outside the recording {root} (it resolves to {real}). "
            "A recording never links to files elsewhere, and areal-debug reads "
            "nothing outside it; replace the link with the file itself."
        )
    return path


def check_entry(entry: Any, path: str, where: str) -> None:
    """A payload's entry in step.json: file, checksum, codec and sizes."""
    if not isinstance(entry, dict):
        raise invalid(
            path, "step metadata", f"{where} is {_kind(entry)}, not an object"
        )
    sha = entry.get("sha256")
    if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        raise invalid(
            path, "step metadata", f"{where}.sha256 is {sha!r}, not 64 hex digits"
        )
    codec = entry.get("codec", Codec.NONE.value)
    if not isinstance(codec, str):
        raise invalid(
            path,
            "step metadata",
            f"{where}.codec is {codec!r}, not one of {tuple(Codec.names())}",
        )
    for key, default in (("bytes", None), ("raw_bytes", 0), ("num_trajectories", 0)):
        value = entry.get(key, default)
        if not (is_int(value) and 0 <= value < 1 << 62):
            raise invalid(
                path,
                "step metadata",
                f"{where}.{key} is {value!r}, not a whole number of plausible size",
            )
    keys = entry.get("keys", {})
    if not (
        isinstance(keys, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items())
    ):
        raise invalid(
            path, "step metadata", f"{where}.keys must map key names to dtype names"
        )


def check_step_meta(meta: Any, path: str, step: int, num_shards: int) -> dict:
    """step.json of ``step`` in a recording of ``num_shards`` shards."""
    if not isinstance(meta, dict):
        raise invalid(path, "step metadata", f"it holds {_kind(meta)}, not an object")
    if meta.get("global_step") != step or not is_int(meta.get("global_step")):
        raise invalid(
            path,
            "step metadata",
            f"global_step is {meta.get('global_step')!r} in the directory of "
            f"step {step}",
            "It was copied from another step or edited; restore it or re-record.",
        )
    for key in ("epoch", "num_trajectories", "num_tokens"):
        value = meta.get(key)
        if not (is_int(value) and value >= 0):
            raise invalid(
                path, "step metadata", f"{key} is {value!r}, not a whole number >= 0"
            )
    shards = meta.get("shards")
    if not isinstance(shards, list) or len(shards) != num_shards:
        raise invalid(
            path,
            "step metadata",
            f"'shards' must list {num_shards} payload(s) (the manifest's "
            f"num_shards), it is {_kind(shards)}",
        )
    if meta.get("num_shards", num_shards) != num_shards:
        raise invalid(
            path,
            "step metadata",
            f"num_shards is {meta.get('num_shards')!r}, the manifest says {num_shards}",
        )
    for i, entry in enumerate(shards):
        check_entry(entry, path, f"shards[{i}]")
    if "teacher_logp" in meta:
        check_entry(meta["teacher_logp"], path, "teacher_logp")
    versions = meta.get("policy_version")
    if versions is not None and not (
        isinstance(versions, list) and len(versions) == 2 and all(map(is_int, versions))
    ):
        raise invalid(
            path, "step metadata", f"policy_version is {versions!r}, not [min, max]"
        )
    return meta


def check_stats(stats: Any, path: str) -> dict:
    """stats.json: statistics and timings as numbers by name, optional checksum."""
    if not isinstance(stats, dict):
        raise invalid(path, "recorded statistics", f"it holds {_kind(stats)}")
    for key in ("stats", "timings", "rollout"):
        table = stats.get(key, {})
        if not (
            isinstance(table, dict)
            and all(
                isinstance(k, str) and (is_number(v) or v is None)
                for k, v in table.items()
            )
        ):
            raise invalid(
                path, "recorded statistics", f"'{key}' must map names to numbers"
            )
    if "stats" not in stats:
        raise invalid(path, "recorded statistics", "it has no 'stats'")
    sha = stats.get("rng_sha256")
    if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        raise invalid(path, "recorded statistics", f"rng_sha256 is {sha!r}")
    return stats


def check_rng(states: Any, path: str) -> dict:
    """rng.pt: every rank's RNG states, as rng_state.capture() returns them."""
    ranks = states.get("ranks") if isinstance(states, dict) else None
    if not (
        isinstance(ranks, list)
        and ranks
        and all(
            isinstance(r, dict)
            and isinstance(r.get("python"), list | tuple)
            and isinstance(r.get("numpy"), list | tuple)
            and len(r["numpy"]) == 5
            and isinstance(r.get("torch"), list)
            for r in ranks
        )
    ):
        raise invalid(
            path,
            "RNG state",
            "it must hold 'ranks', one {python, numpy, torch} state per rank",
            "Restore the file, or replay with debug.restore_rng=false.",
        )
    return states


def check_batch(batch: Any, path: str) -> list[dict]:
    """A loaded payload: trajectories whose tensors the trainer can use."""
    if not isinstance(batch, list) or not all(isinstance(t, dict) for t in batch):
        raise invalid(
            path,
            "payload",
            f"it holds {_kind(batch)}; a payload is a list of trajectories "
            "(dicts of tensors)",
            "Re-record the step.",
        )
    for i, traj in enumerate(batch):
        problem = _trajectory_problem(traj)
        if problem:
            raise invalid(
                path, "payload", f"trajectory {i}{problem}", "Re-record the step."
            )
    return batch


# What each key the trainer reads must be: (test, description).
_FLOAT = (lambda t: t.is_floating_point(), "a floating-point tensor")
_WHOLE = (
    lambda t: not t.is_floating_point() and not t.is_complex(),
    "an integer or bool tensor",
)
KEY_KINDS = {
    "input_ids": _WHOLE,
    "attention_mask": _WHOLE,
    "loss_mask": _WHOLE,
    "versions": _WHOLE,
    "logprobs": _FLOAT,
    "prox_logp": _FLOAT,
}


def _trajectory_problem(traj: dict) -> str | None:
    """What is wrong with one trajectory (as ``[key] ...``), None if nothing."""
    import torch  # with the payload, not the module (see reader)

    for key in traj:
        if not isinstance(key, str):
            return f" has the key {key!r}, not a name"
    for key, (ok, kind) in KEY_KINDS.items():
        value = traj.get(key)
        if value is not None and not (
            isinstance(value, torch.Tensor) and value.dim() >= 1 and ok(value)
        ):
            return f"[{key!r}] must be {kind}, it is {_kind(value)}"
    ids = traj.get("input_ids")
    if ids is None:
        return None
    for key in TOKEN_KEYS:
        value = traj.get(key)
        if value is not None and value.shape != ids.shape:
            return (
                f"[{key!r}] is shaped {list(value.shape)}, input_ids "
                f"{list(ids.shape)}: each token needs one"
            )
    return None


def _kind(value: Any) -> str:
    """A short description of a value found where something else was expected."""
    import torch  # with the payload, not the module (see reader)

    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor {list(value.shape)}"
    if isinstance(value, list | tuple | dict):
        return f"a {type(value).__name__} of {len(value)}"
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
