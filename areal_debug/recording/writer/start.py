# SPDX-License-Identifier: Apache-2.0
"""A recording started or continued, by the coordinator before any head writes:
its manifest (two recordings are never mixed), what a killed dump run left
half-done swept, the steps a resumed run records again moved aside."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from typing import Any

from areal_debug.recording import retention
from areal_debug.recording.atomic import atomic_write_json, read_json
from areal_debug.recording.format import (
    KEPT,
    MANIFEST,
    SUPERSEDED,
    TEMPORARY_PREFIX,
    RecordingError,
    list_step_dirs,
)
from areal_debug.recording.manifest import Manifest
from areal_debug.recording.writer.jobs import logger


def write_manifest(path: str, manifest: Manifest | dict[str, Any]) -> None:
    """Create or continue a recording at ``path`` (the coordinator only).

    Continuing is allowed for the same experiment, trial and layout (a resumed
    dump run); anything else is refused so no recording is ever mixed.
    """
    if isinstance(manifest, dict):
        manifest = Manifest.from_json(manifest)
    manifest_path = os.path.join(path, MANIFEST)
    if os.path.exists(manifest_path):
        old = Manifest.from_json(read_json(manifest_path, "manifest"))
        mismatched = {
            k: (getattr(old, k), getattr(manifest, k))
            for k in ("format_version", "experiment_name", "trial_name")
            if getattr(old, k) != getattr(manifest, k)
        }
        shape = ("num_shards", "steps_per_epoch")
        old_layout = {k: getattr(old.layout, k) for k in shape}
        new_layout = {k: getattr(manifest.layout, k) for k in shape}
        if old_layout != new_layout:
            mismatched["layout"] = (old_layout, new_layout)
        if mismatched:
            details = "; ".join(
                f"{k}: recorded {a!r}, this run {b!r}"
                for k, (a, b) in mismatched.items()
            )
            raise RecordingError(
                f"debug.path={path} already holds a different recording ({details}). "
                "Recordings are never mixed or overwritten: set debug.path to a new "
                "directory, or move the old recording away."
            )
        logger.info(
            f"Continuing the recording at {path} (same experiment, trial and layout)."
        )
        manifest.created = old.created or manifest.created
    atomic_write_json(manifest_path, manifest.to_json())


def sweep_leftovers(path: str, before_step: int) -> list[str]:
    """Remove what a killed dump run left half-done: temporary files of atomic
    writes, half-deleted steps and half-copied checkpoints.

    None of it is visible as recorded data (a reader never lists it), but it
    holds disk. Run by the coordinator of a resumed run before any head
    writes; steps from ``before_step`` on are being recorded again and are
    moved aside whole (``supersede_steps``), so their directories are left be.
    """
    swept = []
    kept_root = os.path.join(path, KEPT)
    places = [path, kept_root] + [
        d for s, d in list_step_dirs(path).items() if s < before_step
    ]
    for place in places:
        if not os.path.isdir(place):
            continue
        for name in os.listdir(place):
            half_done = (
                name.startswith(TEMPORARY_PREFIX)
                or name.startswith(retention.DELETING_PREFIX)
                or (place == kept_root and name.endswith(".partial"))
            )
            if half_done:
                target = os.path.join(place, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(target)
                swept.append(target)
    if swept:
        logger.warning(
            f"Removed {len(swept)} leftovers of an interrupted dump run from {path} "
            "(temporary files, half-deleted steps, half-copied checkpoints); no "
            "recorded step was among them."
        )
    return swept


def supersede_steps(path: str, first_step: int) -> list[int]:
    """Move steps >= ``first_step`` aside before they are recorded again.

    A resumed dump run regenerates those steps; the old ones go to
    ``superseded/<time>/`` instead of being overwritten (nothing is lost).
    """
    if not os.path.isdir(path):
        return []
    moved = []
    target = os.path.join(path, SUPERSEDED, time.strftime("%Y%m%d-%H%M%S"))
    for step, step_dir in list_step_dirs(path).items():
        if step >= first_step:
            os.makedirs(target, exist_ok=True)
            shutil.move(step_dir, os.path.join(target, os.path.basename(step_dir)))
            moved.append(step)
    if moved:
        logger.warning(
            f"Steps {moved} were already recorded at {path} and will be recorded "
            f"again by this run; the old ones were moved to {target}."
        )
    return moved
