# SPDX-License-Identifier: Apache-2.0
"""Reading a recording: validation first, checksums on every load, weights_only only."""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from areal_debug.recording.atomic import open_regular, read_json
from areal_debug.recording.codecs import decode_payload, sha256_bytes
from areal_debug.recording.contents import BatchContents
from areal_debug.recording.format import (
    MANIFEST,
    RNG,
    STAGE_TENSORS,
    STAGES_FILE,
    STATS,
    STEP_META,
    SUPERSEDED,
    SUPPORTED_FORMAT_VERSIONS,
    Codec,
    RecordingError,
    complete_step_dirs,
    list_step_dirs,
    recording_below,
    reserved_marker_name,
    step_dirname,
    stop_consequence,
    stopped_marker_name,
)
from areal_debug.recording.lock import writer_of
from areal_debug.recording.manifest import Manifest
from areal_debug.recording.schema import (
    PayloadEntry,
    StepMeta,
    check_batch,
    check_rng,
    check_stats,
    inside,
    invalid,
    member,
)

# torch is imported where a payload or tensor is read, not with the module: the
# CLI's metadata commands (ls, inspect) read JSON only and start in a fraction of
# the time torch takes to import.
if TYPE_CHECKING:
    import torch


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


def format_ranges(steps: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    steps = sorted(steps)
    if not steps:
        return "none"
    parts, start, prev = [], steps[0], steps[0]
    for s in steps[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(parts)


def not_a_recording(path: str) -> str:
    """Why ``path`` (a directory without a manifest) is no recording, and where
    one is: said for a replay's ``debug.path`` and a command's argument alike."""
    below = recording_below(path)
    if below is not None:
        return (
            f"{path} is not a recording (it has no {MANIFEST}), but it holds one: "
            f"{below}. Give that directory instead (as debug.path, or to the "
            "areal-debug command)."
        )
    return (
        f"{path} is not a recording: it has no {MANIFEST}. Give the directory a "
        "dump run (debug.dump_rollout_data=true) wrote, as debug.path or to the "
        "areal-debug command (`areal-debug ls FILEROOT` lists them under a "
        "fileroot); if that run was killed before its first step, record again."
    )


def read_manifest(path: str) -> Manifest:
    """The recording's manifest, refused with why and what to do where ``path``
    is not a recording, or one of a format version this areal-debug cannot read."""
    if not os.path.isdir(path):
        raise RecordingError(
            f"No recording at {path}: the directory does not exist. Give the "
            "directory a dump run wrote (it holds manifest.json; `areal-debug ls "
            "FILEROOT` lists them). A replay derives it from the recorded run's "
            "cluster.fileroot, experiment_name and trial_name unless debug.path "
            "names it."
        )
    manifest_path = inside(path, os.path.join(path, MANIFEST))
    if not os.path.exists(manifest_path):
        raise RecordingError(not_a_recording(path))
    raw = _read_json(manifest_path, "manifest")
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if version not in SUPPORTED_FORMAT_VERSIONS:
        written_by = (
            raw.get("areal_debug_version", "?") if isinstance(raw, dict) else "?"
        )
        raise RecordingError(
            f"{manifest_path} has format_version={version!r}, but this areal-debug "
            f"reads format versions {list(SUPPORTED_FORMAT_VERSIONS)}. It was "
            f"written by areal-debug {written_by}; "
            "install that version (or a newer one that reads it) to replay it."
        )
    try:
        return Manifest.from_json(raw)
    except ValueError as e:
        raise RecordingError(
            f"{manifest_path} is not a valid manifest: {e}. The file was edited "
            "or damaged; restore it from a copy or re-record."
        ) from e


class RecordingReader:
    """A validated recording directory."""

    def __init__(self, path: str):
        self.path = path
        self.manifest = read_manifest(path)
        self.num_shards = self.manifest.layout.num_shards
        self.steps_per_epoch = self.manifest.layout.steps_per_epoch
        self._step_meta: dict[int, StepMeta] = {}
        # step_contents by step: computed from the payloads for a recording
        # made before the metadata kept them, which a comparison asks twice.
        self._contents: dict[int, BatchContents] = {}

    # -- which steps exist -------------------------------------------------------
    def available_steps(self) -> list[int]:
        """Complete steps, i.e. those whose step.json exists."""
        return list(complete_step_dirs(self.path))

    def has_step(self, step: int) -> bool:
        """Whether ``step`` is complete (one stat, no directory scan)."""
        return os.path.exists(os.path.join(self.path, step_dirname(step), STEP_META))

    def incomplete_steps(self) -> list[int]:
        """Step directories without step.json: a head did not finish writing."""
        complete = set(self.available_steps())
        return [s for s in list_step_dirs(self.path) if s not in complete]

    def writer(self) -> dict[str, Any] | None:
        """The dump run still writing this recording (pid, host, run, since),
        None if none is: its newest steps may then still be incomplete."""
        return writer_of(self.path)

    def stopped(self) -> list[dict[str, Any]]:
        """Where and why heads stopped recording (empty if none did)."""
        return stop_markers(self.path, self.num_shards)

    def stop_consequence(self, stop: dict[str, Any]) -> str:
        """What a stop marker (one of ``stopped()``) means for replays, in words."""
        step = stop.get("step")
        complete = isinstance(step, int) and step >= 0 and self.has_step(step)
        return stop_consequence(stop, complete)

    def require_steps(self, steps: Iterable[int]) -> None:
        wanted = list(steps)
        have = set(self.available_steps())
        missing = [s for s in wanted if s not in have]
        if not missing:
            return
        stops = self.stopped()
        if stops:
            first = min(stops, key=lambda m: m.get("step", 0))
            raise RecordingError(
                f"The replay needs steps {format_ranges(wanted)} but the recording "
                f"at {self.path} stopped at step {first.get('step')}: writing "
                f"shard {first.get('shard')} failed with {first.get('error')} "
                f"(complete steps: {format_ranges(have)}). Replay up to step "
                f"{first.get('step')} - 1 (total_train_steps or "
                "debug.replay_end_step)."
            )
        raise RecordingError(
            f"The replay needs steps {format_ranges(wanted)} but the recording at "
            f"{self.path} lacks steps {format_ranges(missing)} (complete steps: "
            f"{format_ranges(have)}). Likely causes: the dump run stopped earlier "
            "(check its log), debug.path points at another run, or the replay uses "
            "a different experiment_name/trial_name than the dump. Replay fewer "
            "steps (total_train_steps) or record the missing ones."
        )

    def _file(self, step: int, name: Any, where: str = "areal-debug") -> str:
        """The path of the step's file ``name``, refused if it leaves the recording."""
        return member(
            self.path, os.path.join(self.path, step_dirname(step)), name, where
        )

    def step_meta(self, step: int) -> StepMeta:
        """The step's step.json, checked (``schema.StepMeta.from_json``)."""
        if step not in self._step_meta:
            p = self._file(step, STEP_META)
            if not os.path.exists(p):
                self.require_steps([step])
            self._step_meta[step] = StepMeta.from_json(
                _read_json(p, "step metadata"), p, step, self.num_shards
            )
        return self._step_meta[step]

    def _stats_file(self, step: int) -> dict[str, Any] | None:
        """The step's stats.json (statistics, timings, RNG checksum), None if absent."""
        p = self._file(step, STATS)
        if not os.path.exists(p):
            return None
        return check_stats(_read_json(p, "recorded statistics"), p)

    def recorded_stats(self, step: int) -> dict[str, float] | None:
        """The statistics the dump run committed for ``step`` (None if not recorded)."""
        stats = self._stats_file(step)
        return None if stats is None else stats["stats"]

    def recorded_timings(self, step: int) -> dict[str, float]:
        """Wall-clock phase timings of the dump run's ``step`` (seconds)."""
        return (self._stats_file(step) or {}).get("timings", {})

    def recorded_rng(self, step: int) -> dict[str, Any] | None:
        """Every rank's RNG states at the step's dump point (None if not recorded)."""
        path = self._file(step, RNG)
        if not os.path.exists(path):
            return None
        expected = (self._stats_file(step) or {}).get("rng_sha256")
        data = _read_checked(
            path, expected, "Restore the file or replay with debug.restore_rng=false."
        )
        return check_rng(load_payload_bytes(data, path), path)

    def recorded_stages(
        self, step: int, tensors: bool = True
    ) -> tuple[dict[str, Any] | None, dict[str, torch.Tensor] | None]:
        """The step's stage digests (``ranks`` and ``global``) and, when the dump
        run kept them and ``tensors`` asks for them, the per-token stage tensors;
        ``(None, None)`` if absent. Loads torch only for the tensors."""
        path = self._file(step, STAGES_FILE)
        if not os.path.exists(path):
            return None, None
        stages = _read_json(path, "stage digests")
        if not (
            isinstance(stages, dict)
            and isinstance(stages.get("ranks"), list)
            and all(isinstance(r, dict) for r in stages["ranks"])
            and isinstance(stages.get("global"), dict)
        ):
            raise RecordingError(
                f"{path} must hold 'ranks' (a list of objects) and 'global' (an "
                "object). The file is damaged: restore it, delete it to compare "
                "only the statistics, or re-record the step."
            )
        expected = stages.get("tensors_sha256")
        if expected is None or not tensors:
            return stages, None
        import torch

        # Named since the trainer's log-probs are kept by default (and compressed);
        # before, always an uncompressed stage_tensors.pt.
        name = stages.get("tensors_file", STAGE_TENSORS)
        tensors_path = self._file(step, name, f"step {step}'s {STAGES_FILE}")
        data = _read_checked(
            tensors_path,
            expected,
            f"Restore the file, or delete it and {STAGES_FILE} to compare only "
            "the statistics.",
        )
        raw = decode_payload(
            data,
            stages.get("tensors_codec", Codec.NONE.value),
            stages.get("tensors_raw_bytes"),
            tensors_path,
        )
        tensors = load_payload_bytes(raw, tensors_path)
        if not isinstance(tensors, dict) or not all(
            isinstance(t, torch.Tensor) for t in tensors.values()
        ):
            raise RecordingError(
                f"{tensors_path} must hold a dict of tensors, not "
                f"{type(tensors).__name__}. Re-record the step."
            )
        return stages, tensors

    def stage_digests(self, step: int) -> dict[str, Any] | None:
        """A complete step's stage digests without the kept tensors; None where
        the step is not complete or has none."""
        return (
            self.recorded_stages(step, tensors=False)[0]
            if self.has_step(step)
            else None
        )

    def recorded_teacher_logp(self, step: int) -> list[torch.Tensor]:
        """The teacher's log-probs of the step's batch, one tensor per trajectory."""
        import torch

        entry = self.step_meta(step).teacher_logp
        if entry is None:
            raise RecordingError(
                f"Step {step} of the recording at {self.path} holds no teacher "
                "log-probs, but the replayed run has a teacher served as an inference "
                "engine. Record with a single-controller dump run that has the same "
                "teacher, or replay without the teacher (teacher=null)."
            )
        logps, path = self._load_entry(
            step,
            entry,
            "The file changed after it was recorded; restore it or re-record.",
        )
        if not isinstance(logps, list) or not all(
            isinstance(t, torch.Tensor) for t in logps
        ):
            raise RecordingError(
                f"{path} must hold a list of tensors (one per trajectory), not "
                f"{type(logps).__name__} {str(logps)[:80]}. Re-record the step."
            )
        return logps

    def verify_step(self, step: int) -> tuple[int, list[str]]:
        """Read every file of a complete step as a replay would: (files read,
        what is wrong with them). Optional files that are absent do not count."""
        try:
            meta = self.step_meta(step)
        except RecordingError as e:
            return 1, [str(e)]
        loads = [
            *(lambda s=s: self.load_shard(step, s) for s in range(self.num_shards)),
            *(
                [lambda: self.recorded_teacher_logp(step)]
                if meta.teacher_logp is not None
                else []
            ),
            lambda: self.recorded_stats(step),
            lambda: self.recorded_rng(step),
            lambda: self.recorded_stages(step),
        ]
        files, problems = 1, []
        for load in loads:
            try:
                found = load()
            except RecordingError as e:
                found = e
                problems.append(str(e))
            files += found not in (None, (None, None))
        return files, problems

    # -- payloads ----------------------------------------------------------------
    def load_shard(self, step: int, shard: int) -> list[dict[str, Any]]:
        entry = self.step_meta(step).shards[shard].entry
        batch, path = self._load_entry(
            step,
            entry,
            "The file changed after it was recorded (disk error, partial copy, "
            "manual edit); restore it from a copy or re-record.",
        )
        return check_batch(batch, path)

    def _load_entry(self, step: int, entry: PayloadEntry, fix: str) -> tuple[Any, str]:
        """A payload named by step metadata (checksum, decode, weights_only
        load), and its path."""
        path = self._file(step, entry.file, f"step {step}'s {STEP_META}")
        data = _read_checked(path, entry.sha256, fix)
        raw = decode_payload(data, entry.codec, entry.raw_bytes, path)
        return load_payload_bytes(raw, path), path

    def load_batch(self, step: int) -> list[dict[str, Any]]:
        """The step's global batch: its shards' trajectories in head order."""
        return [
            traj
            for shard in range(self.step_meta(step).num_shards)
            for traj in self.load_shard(step, shard)
        ]

    def step_contents(self, step: int) -> BatchContents:
        """Each sample of the step's batch digested (prompt, completion, reward,
        versions), in batch order: read from the step's metadata, or computed
        from its payloads where it was recorded before the metadata kept them."""
        if step not in self._contents:
            parts = [shard.contents for shard in self.step_meta(step).shards]
            self._contents[step] = (
                BatchContents.joined(parts)
                if all(part is not None for part in parts)
                else BatchContents.of_batch(self.load_batch(step))
            )
        return self._contents[step]

    def reading(self, folder: str) -> RecordingReader:
        """This recording's manifest and layout, reading the steps under
        ``folder`` (a superseded attempt's), none of this reader's read."""
        other = copy.copy(self)
        other.path = folder
        other._step_meta, other._contents = {}, {}
        return other

    def load_for_head(
        self, step: int, dp_rank: int, dp_size: int
    ) -> list[dict[str, Any]]:
        """This head's part of a step, re-sharded if the topology changed.

        Same number of heads: exactly the recorded shard. Otherwise the step's
        global batch (shards concatenated in rank order) is cut into ``dp_size``
        contiguous equal chunks.
        """
        if dp_size == self.num_shards:
            return self.load_shard(step, dp_rank)
        whole: list[dict[str, Any]] = []
        for shard in range(self.num_shards):
            whole.extend(self.load_shard(step, shard))
        return reshard(whole, dp_rank, dp_size, step=step, num_shards=self.num_shards)


def stop_markers(path: str, num_shards: int) -> list[dict[str, Any]]:
    """The stop markers of a recording's heads (where and why each stopped)."""
    found = []
    for shard in range(num_shards):
        p = inside(path, os.path.join(path, stopped_marker_name(shard)))
        if os.path.exists(p):
            marker = _read_json(p, "stop marker")
        else:
            # Left under its reserved name by a head whose directory had turned
            # read-only.
            p = inside(path, os.path.join(path, reserved_marker_name(shard)))
            marker = reserved_marker(p)
            if marker is None:
                continue
        if not isinstance(marker, dict):
            raise invalid(p, "stop marker", "it is not a JSON object")
        found.append(marker)
    return found


def _read_checked(path: str, expected_sha256: str | None, fix: str) -> bytes:
    """The file's bytes, after checking them against their recorded sha256."""
    try:
        with open_regular(path) as f:
            data = f.read()
    except OSError as e:
        raise _unreadable(path, e) from e
    if expected_sha256 is not None:
        actual = sha256_bytes(data)
        if actual != expected_sha256:
            raise RecordingError(
                f"Checksum mismatch in {path}: expected sha256 {expected_sha256}, "
                f"got {actual}. {fix}"
            )
    return data


def _read_json(path: str, what: str) -> Any:
    """``read_json`` for a reader: a file gone meanwhile is a RecordingError too."""
    try:
        return read_json(path, what)
    except FileNotFoundError as e:
        raise _unreadable(path, e) from e


def _unreadable(path: str, e: OSError) -> RecordingError:
    if not os.path.isdir(os.path.dirname(path)):
        return RecordingError(
            f"Cannot read {path}: its step was deleted while it was being read. "
            "A dump run still writing this recording deletes old steps when it "
            "keeps a ring buffer or a disk budget (debug.keep_last_steps, "
            "debug.max_disk_gb): pin the steps you read (debug.pin_steps) or read "
            "a copy of the recording."
        )
    return RecordingError(
        f"Cannot read {path}: {e}. The step is listed as complete, so the file "
        "was removed or damaged after recording."
    )


def reshard(
    whole: list, dp_rank: int, dp_size: int, *, step: int, num_shards: int
) -> list:
    if len(whole) % dp_size:
        raise RecordingError(
            f"Cannot split step {step} for {dp_size} data-parallel heads: it holds "
            f"{len(whole)} trajectories (recorded by {num_shards} heads), which is "
            f"not divisible by {dp_size}. Replay with a data-parallel size that "
            f"divides {len(whole)}, e.g. {num_shards}."
        )
    chunk = len(whole) // dp_size
    return whole[dp_rank * chunk : (dp_rank + 1) * chunk]


def load_payload_bytes(data: bytes, name: str) -> list[dict[str, Any]]:
    """Load a payload with ``weights_only=True``: no code from the file ever runs."""
    import torch

    from areal_debug.recording.packed_payload import is_packed, unpack

    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        raise RecordingError(
            f"Refused to load {name}: it contains objects other than tensors and "
            "plain containers, so it cannot be loaded safely (torch.load with "
            f"weights_only=True rejected it: {str(e).splitlines()[0]}). areal-debug "
            "never writes such payloads; the file was not produced by a dump run."
        ) from e
    except Exception as e:  # noqa: BLE001 - any other failure means a broken file
        raise RecordingError(f"Cannot load payload {name}: {e!r}") from e
    if not is_packed(obj):
        return obj  # format v1, or v2 before packing
    try:
        return unpack(obj)
    except Exception as e:  # noqa: BLE001 - a malformed table or template
        raise RecordingError(
            f"Cannot unpack payload {name}: {e}. The file was not written by "
            "areal-debug or was altered; restore it or re-record the step."
        ) from e


def superseded_attempts(reader: RecordingReader) -> list[tuple[str, RecordingReader]]:
    """Each resume's superseded attempt (``superseded/<time>/``: the steps the
    interrupted run had recorded and the resumed one recorded again), oldest
    first, as a reader of those steps (the recording's manifest and layout)."""
    root = inside(reader.path, os.path.join(reader.path, SUPERSEDED))
    if not os.path.isdir(root):
        return []
    out = []
    for name in sorted(os.listdir(root)):
        folder = inside(reader.path, os.path.join(root, name))
        if not os.path.isdir(folder):
            continue
        out.append((name, reader.reading(folder)))
    return out
