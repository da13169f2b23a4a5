# SPDX-License-Identifier: Apache-2.0
"""What a valid recording file holds, checked before anything in it is used.

A recording may come from anywhere (a copy, a colleague, a damaged disk). Every
file a reader uses passes one of these checks first, so whatever is wrong with
it ends in one ``RecordingError`` naming the file and the problem, never in a
``KeyError`` deep inside a replay, and no name in a file can lead a reader to
a file outside the recording.

Step metadata (``step.json``, ``shard-NNNNN.json``, ``teacher_logp.json``) is
typed here as well (``StepMeta``, ``ShardMeta``, ``PayloadEntry``): its checks
and its JSON, both ways, in one place, for the writer and every reader. (Here,
not in a module of its own: what a valid step.json holds is this module's
subject.) What each sample holds, digested (``contents``), is computed in
``contents.py`` and checked here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from areal_debug.recording.contents import COLUMNS, BatchContents
from areal_debug.recording.format import FORMAT_VERSION, Codec, RecordingError

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


def _at(where: str, key: str) -> str:
    """``key`` of the object at ``where`` ("" for a file's top), as errors name it."""
    return f"{where}.{key}" if where else key


def _whole(obj: dict, key: str, default: Any, path: str, where: str, what: str) -> int:
    """A size or count of a payload entry: a whole number of plausible size."""
    value = obj.get(key, default)
    if not (is_int(value) and 0 <= value < 1 << 62):
        raise invalid(
            path,
            what,
            f"{_at(where, key)} is {value!r}, not a whole number of plausible size",
        )
    return value


def _versions(value: Any, path: str, where: str, what: str) -> tuple[int, int] | None:
    """A ``policy_version``: [min, max] of the generated tokens, or null."""
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(map(is_int, value))):
        raise invalid(
            path, what, f"{_at(where, 'policy_version')} is {value!r}, not [min, max]"
        )
    return value[0], value[1]


def _object(obj: Any, path: str, where: str, what: str) -> dict:
    if not isinstance(obj, dict):
        raise invalid(
            path,
            what,
            f"{where} is {_kind(obj)}, not an object"
            if where
            else f"it holds {_kind(obj)}, not an object",
        )
    return obj


# The metadata of a step's payloads, typed: what ``step.json``, ``shard-NNNNN.json``
# and ``teacher_logp.json`` hold (docs/format.md). The one place that reads
# (``from_json``, with every check) and writes (``to_json``) them: the writer
# builds these objects, the reader and the inspect commands use their fields.
@dataclass(frozen=True)
class PayloadEntry:
    """A stored payload as metadata names it: ``save_payload``'s description of
    its file (name, codec, sizes, sha256) and how many trajectories it holds."""

    file: str  # a name in the step's directory, checked by ``member`` when read
    sha256: str  # over the bytes on disk
    bytes: int  # on disk
    # The torch.save output's size before the codec; None in format 1, which
    # had no codec (its payloads are plain torch.save files).
    raw_bytes: int | None = None
    codec: str = Codec.NONE.value
    num_trajectories: int = 0

    @classmethod
    def stored(cls, stored: dict[str, Any], num_trajectories: int) -> PayloadEntry:
        """The entry of a payload just written (``save_payload``'s metadata)."""
        return cls(
            file=stored["file"],
            sha256=stored["sha256"],
            bytes=stored["bytes"],
            raw_bytes=stored["raw_bytes"],
            codec=stored["codec"],
            num_trajectories=num_trajectories,
        )

    @classmethod
    def from_json(
        cls, obj: Any, path: str, where: str = "", what: str = "step metadata"
    ) -> PayloadEntry:
        """The entry ``obj`` found at ``where`` in the file ``path``, checked:
        ``RecordingError`` naming the file and the key that is wrong."""
        obj = _object(obj, path, where, what)
        sha = obj.get("sha256")
        if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
            raise invalid(
                path, what, f"{_at(where, 'sha256')} is {sha!r}, not 64 hex digits"
            )
        codec = obj.get("codec", Codec.NONE.value)
        if not isinstance(codec, str):
            raise invalid(
                path,
                what,
                f"{_at(where, 'codec')} is {codec!r}, not one of "
                f"{tuple(Codec.names())}",
            )
        size = _whole(obj, "bytes", None, path, where, what)
        raw = _whole(obj, "raw_bytes", 0, path, where, what)
        count = _whole(obj, "num_trajectories", 0, path, where, what)
        name = obj.get("file")
        if not isinstance(name, str):
            raise invalid(path, what, f"{_at(where, 'file')} is {name!r}, not a name")
        return cls(
            file=name,
            sha256=sha,
            bytes=size,
            raw_bytes=raw if "raw_bytes" in obj else None,
            codec=codec,
            num_trajectories=count,
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "file": self.file,
            "codec": self.codec,
            "bytes": self.bytes,
            "raw_bytes": self.raw_bytes,
            "sha256": self.sha256,
            "num_trajectories": self.num_trajectories,
        }
        if self.raw_bytes is None:  # read from format 1: left out, as it was
            del out["raw_bytes"]
        return out


@dataclass(frozen=True)
class ShardMeta:
    """One data-parallel head's shard of a step: its payload's entry and what
    the batch holds (``shard-NNNNN.json``, and ``step.json``'s ``shards``)."""

    entry: PayloadEntry
    shard: int  # the head's index
    num_sequences: int  # rows of attention_mask
    num_tokens: int  # sum of attention_mask
    keys: dict[str, str]  # key name -> dtype or type name
    policy_version: tuple[int, int] | None  # over generated tokens; None: no versions
    # Each sample's prompt, completion, reward and versions, digested; None in
    # recordings made before the metadata kept them (computed from the payload).
    contents: BatchContents | None = None

    @property
    def num_trajectories(self) -> int:
        return self.entry.num_trajectories

    @classmethod
    def written(
        cls, shard: int, stored: dict[str, Any], described: dict[str, Any]
    ) -> ShardMeta:
        """The shard a head just stored: ``save_payload``'s metadata and
        ``describe_batch``'s description of the batch."""
        versions = described["policy_version"]
        return cls(
            entry=PayloadEntry.stored(stored, described["num_trajectories"]),
            shard=shard,
            num_sequences=described["num_sequences"],
            num_tokens=described["num_tokens"],
            keys=dict(described["keys"]),
            policy_version=None if versions is None else (versions[0], versions[1]),
            contents=BatchContents.of_json(described["contents"])
            if described.get("contents") is not None
            else None,
        )

    @classmethod
    def from_json(
        cls, obj: Any, path: str, where: str = "", what: str = "step metadata"
    ) -> ShardMeta:
        """The shard ``obj`` found at ``where`` in the file ``path``, checked."""
        entry = PayloadEntry.from_json(obj, path, where, what)
        keys = obj.get("keys", {})
        if not (
            isinstance(keys, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items())
        ):
            raise invalid(
                path, what, f"{_at(where, 'keys')} must map key names to dtype names"
            )
        return cls(
            entry=entry,
            shard=_whole(obj, "shard", None, path, where, what),
            num_sequences=_whole(obj, "num_sequences", None, path, where, what),
            num_tokens=_whole(obj, "num_tokens", None, path, where, what),
            keys=keys,
            policy_version=_versions(obj.get("policy_version"), path, where, what),
            contents=check_contents(obj["contents"], path, _at(where, "contents"), what)
            if obj.get("contents") is not None
            else None,
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "shard": self.shard,
            **self.entry.to_json(),
            "num_sequences": self.num_sequences,
            "num_tokens": self.num_tokens,
            "keys": dict(self.keys),
            "policy_version": _versions_json(self.policy_version),
        }
        if self.contents is not None:
            out["contents"] = self.contents.to_json()
        return out


def check_contents(obj: Any, path: str, where: str, what: str) -> BatchContents:
    """A shard's ``contents``, checked for shape (one value per sample in each
    column), not digest by digest: a comparison reads hundreds of thousands."""
    obj = _object(obj, path, where, what)
    rows = obj.get("rows")
    if not (isinstance(rows, list) and all(is_int(n) and n >= 0 for n in rows)):
        raise invalid(path, what, f"{where}.rows must list whole numbers >= 0")
    for name in COLUMNS:
        _list_of(
            obj.get(name),
            sum(rows),
            "values (one per sample, the sum of rows)",
            f"{where}.{name}",
            path,
            what,
        )
    return BatchContents.of_json(obj)


def _list_of(value: Any, n: int, items: str, name: str, path: str, what: str) -> list:
    """``value``, refused unless it is a list of ``n``."""
    if not isinstance(value, list) or len(value) != n:
        raise invalid(path, what, f"{name} must list {n} {items}, it is {_kind(value)}")
    return value


@dataclass(frozen=True)
class StepMeta:
    """A complete step (``step.json``): its place in training, its totals over
    the shards, every head's shard in head order, and the teacher's log-probs
    when the run had a teacher served as an inference engine."""

    format_version: int  # of the areal-debug that wrote the step
    global_step: int
    epoch: int
    epoch_step: int
    num_shards: int
    num_trajectories: int
    num_tokens: int
    policy_version: tuple[int, int] | None  # over all shards
    shards: tuple[ShardMeta, ...]
    teacher_logp: PayloadEntry | None = None

    @classmethod
    def of_shards(
        cls,
        global_step: int,
        steps_per_epoch: int,
        shards: list[ShardMeta],
        teacher_logp: PayloadEntry | None = None,
    ) -> StepMeta:
        """The step whose heads stored ``shards`` (in head order): its totals
        summed over them, its policy versions their widest range."""
        versions = [s.policy_version for s in shards if s.policy_version]
        return cls(
            format_version=FORMAT_VERSION,
            global_step=global_step,
            epoch=global_step // steps_per_epoch,
            epoch_step=global_step % steps_per_epoch,
            num_shards=len(shards),
            num_trajectories=sum(s.num_trajectories for s in shards),
            num_tokens=sum(s.num_tokens for s in shards),
            policy_version=(min(v[0] for v in versions), max(v[1] for v in versions))
            if versions
            else None,
            shards=tuple(shards),
            teacher_logp=teacher_logp,
        )

    @property
    def payloads(self) -> tuple[PayloadEntry, ...]:
        """Every payload of the step: the shards' in head order, then the
        teacher's log-probs if recorded."""
        teacher = () if self.teacher_logp is None else (self.teacher_logp,)
        return (*(s.entry for s in self.shards), *teacher)

    @classmethod
    def from_json(cls, meta: Any, path: str, step: int, num_shards: int) -> StepMeta:
        """step.json of ``step`` in a recording of ``num_shards`` shards, checked:
        ``RecordingError`` naming the file and what is wrong. Keys it does not
        know are ignored; those format 1 lacks (a payload's codec and raw size)
        read as format 1 meant them."""
        what = "step metadata"
        meta = _object(meta, path, "", what)
        if meta.get("global_step") != step or not is_int(meta.get("global_step")):
            raise invalid(
                path,
                what,
                f"global_step is {meta.get('global_step')!r} in the directory of "
                f"step {step}",
                "It was copied from another step or edited; restore it or re-record.",
            )
        counts = {}
        for key in (
            "epoch",
            "num_trajectories",
            "num_tokens",
            "format_version",
            "epoch_step",
        ):
            counts[key] = value = meta.get(key)
            if not (is_int(value) and value >= 0):
                raise invalid(
                    path, what, f"{key} is {value!r}, not a whole number >= 0"
                )
        shards = _list_of(
            meta.get("shards"),
            num_shards,
            "payload(s) (the manifest's num_shards)",
            "'shards'",
            path,
            what,
        )
        if meta.get("num_shards", num_shards) != num_shards:
            raise invalid(
                path,
                what,
                f"num_shards is {meta.get('num_shards')!r}, the manifest says "
                f"{num_shards}",
            )
        return cls(
            global_step=step,
            num_shards=num_shards,
            shards=tuple(
                ShardMeta.from_json(entry, path, f"shards[{i}]")
                for i, entry in enumerate(shards)
            ),
            teacher_logp=PayloadEntry.from_json(
                meta["teacher_logp"], path, "teacher_logp"
            )
            if "teacher_logp" in meta
            else None,
            policy_version=_versions(meta.get("policy_version"), path, "", what),
            **counts,
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "format_version": self.format_version,
            "global_step": self.global_step,
            "epoch": self.epoch,
            "epoch_step": self.epoch_step,
            "num_shards": self.num_shards,
            "num_trajectories": self.num_trajectories,
            "num_tokens": self.num_tokens,
            "policy_version": _versions_json(self.policy_version),
            "shards": [s.to_json() for s in self.shards],
        }
        if self.teacher_logp is not None:
            out["teacher_logp"] = self.teacher_logp.to_json()
        return out


def _versions_json(versions: tuple[int, int] | None) -> list[int] | None:
    return None if versions is None else list(versions)


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
