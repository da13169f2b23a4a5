# SPDX-License-Identifier: Apache-2.0
"""On-disk format of a recording (v2; v1 still read): versions, names, step
directories, stop markers, the codecs' names (``Codec``). Encoding is in ``codecs``,
atomic I/O in ``atomic``, what a payload may hold in ``writer.payload_rules``.

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

import os
from enum import StrEnum
from typing import Any

# v2: payloads may be compressed (shard metadata names the codec). v1 payloads are
# plain torch.save files and load unchanged: no migration step is needed.
# v3: the kept stage tensors go through the codec too, named in stages.json (a v2
# reader would look for a stage_tensors.pt that is not there).
FORMAT_VERSION = 3
SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)
# What a replay writes into its (AReaL) log directory. Named here, below every
# layer that reads or writes it, so the choice of a replay's trial (config) and
# the report itself (compare) name the same file.
REPLAY_REPORT_NAME = "replay_report.json"
# Beside the report: the replay's own stage digests, one file per step
# (``step-NNNNNN.json``, the recording's stages.json form), so that two replays can
# be compared with each other (``areal-debug selfcheck``), not only with the
# recording.
REPLAY_STAGES_DIRNAME = "replay_stages"
# Each blamed step's sample parts (debug.blame_steps), in the run's log folder.
BLAME_DIRNAME = "blame"


class StepRanges:
    """Steps and ranges, ``'0-9,50,100-'``: the one grammar of
    ``debug.record_steps`` and of every command's ``--steps``. A range without an
    end runs to the last step."""

    def __init__(self, ranges: list[tuple[int, int | None]]):
        self.ranges = ranges

    @classmethod
    def parse(cls, spec: str | None, what: str) -> StepRanges | None:
        """None for no spec (every step); a ValueError naming ``what`` (the key or
        option, as the person wrote it: ``debug.record_steps=``, ``--steps ``)."""
        if spec is None or str(spec).strip() == "":
            return None
        ranges: list[tuple[int, int | None]] = []
        for part in str(spec).split(","):
            part = part.strip()
            try:
                if "-" in part:
                    lo, hi = part.split("-", 1)
                    ranges.append((int(lo), int(hi) if hi.strip() else None))
                else:
                    ranges.append((int(part), int(part)))
            except ValueError:
                raise ValueError(
                    f"{what}{spec!r}: {part!r} is not a step or a range. Write "
                    "steps and ranges separated by commas, e.g. '0-9,50,100-' (a "
                    "range without an end runs to the last step)."
                ) from None
        for lo, hi in ranges:
            if lo < 0 or (hi is not None and hi < lo):
                raise ValueError(f"{what}{spec!r}: bad range {lo}-{hi}.")
        return cls(ranges)

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and any(
            lo <= step and (hi is None or step <= hi) for lo, hi in self.ranges
        )


class Codec(StrEnum):
    """How a payload's bytes are stored: its metadata's ``codec`` (the member's
    value) and the suffix of its file name. The one list of codecs."""

    ZSTD = "zstd", ".pt.zst"
    # Also every v1 payload, whose metadata names no codec.
    NONE = "none", ".pt"

    def __new__(cls, value: str, suffix: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.suffix = suffix
        return member

    @classmethod
    def names(cls) -> list[str]:
        """The codecs' names, as metadata and ``debug.compression`` spell them."""
        return [c.value for c in cls]


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
# Directory name of a recording under <fileroot>/<experiment>/<trial>/. Chosen so
# it cannot be mistaken for AReaL's own `rollout.dump_to_file` JSONL output,
# which lives under <log dir>/rollout/<version>/.
RECORDING_DIRNAME = "areal_debug_recording"
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


# Recover checkpoints kept with a recording (areal_debug/recording/checkpoints.py).
KEPT = "recover"
# Steps a resumed dump run recorded again, moved aside (never deleted):
# superseded/<time>/step-NNNNNN/, one folder per resume.
SUPERSEDED = "superseded"


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


def complete_step_dirs(path: str) -> dict[int, str]:
    """{global step: directory} of the steps whose step.json exists."""
    return {
        step: d
        for step, d in list_step_dirs(path).items()
        if os.path.exists(os.path.join(d, STEP_META))
    }


def shard_payload_name(shard: int, codec: str = Codec.NONE) -> str:
    return f"shard-{shard:05d}{Codec(codec).suffix}"


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


def stage_tensors_name(codec: str = Codec.NONE) -> str:
    """The kept per-token stage tensors' file: ``stage_tensors.pt`` through the
    recording's codec (``stages.json`` names it; older recordings have no name
    there and an uncompressed ``stage_tensors.pt``)."""
    return f"{STAGE_TENSORS}{Codec(codec).suffix.removeprefix('.pt')}"


def teacher_payload_name(codec: str = Codec.NONE) -> str:
    return f"teacher_logp{Codec(codec).suffix}"


def shard_meta_name(shard: int) -> str:
    return f"shard-{shard:05d}.json"


def recording_below(path: str) -> str | None:
    """The recording one level below ``path`` (a trial directory's
    ``RECORDING_DIRNAME``), or None."""
    below = os.path.join(path, RECORDING_DIRNAME)
    return below if os.path.isfile(os.path.join(below, MANIFEST)) else None
