# SPDX-License-Identifier: Apache-2.0
"""A stand-in for AReaL's ``areal.utils.checkpoint_pointer`` (crash-safe recover
checkpoints, AReaL main @235010ae), which no AReaL build we can install has yet.

Only the layout and the calls areal-debug's adapter makes, as that file defines
them: generations under ``<save root>/checkpoint_generations/generation_stepNNNNNNNN/``
with ``manifest/`` and ``payloads/<engine>/``, published by a JSON pointer
``<save root>/LATEST`` (format_version, generation, global_step, engines); the
legacy ``recover_info`` + ``<engine>/recover_checkpoint`` layout is read only where
no LATEST exists. Replace with the real module once a build has it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

LATEST_FILENAME = "LATEST"


class CheckpointConsistencyError(RuntimeError):
    pass


@dataclass(frozen=True)
class PointerRecord:
    format_version: int
    generation: str
    global_step: int
    engines: list

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)


@dataclass(frozen=True)
class ResumeSource:
    manifest: str
    payloads: dict
    label: str
    transactional: bool


def generation_dirname(global_step: int) -> str:
    return f"generation_step{global_step:08d}"


def generation_dir(save_root: str, global_step: int) -> str:
    return os.path.join(
        save_root, "checkpoint_generations", generation_dirname(global_step)
    )


def manifest_dir(generation: str) -> str:
    return os.path.join(generation, "manifest")


def payload_dir(generation: str, engine_name: str) -> str:
    return os.path.join(generation, "payloads", engine_name)


def latest_path(save_root: str) -> str:
    return os.path.join(save_root, LATEST_FILENAME)


def make_record(global_step: int, engine_names: list) -> PointerRecord:
    return PointerRecord(1, generation_dirname(global_step), global_step, engine_names)


def read_latest(save_root: str) -> PointerRecord | None:
    if not os.path.exists(latest_path(save_root)):
        return None
    with open(latest_path(save_root)) as f:
        return PointerRecord(**json.load(f))


def resolve_checkpoint(save_root: str, engine_names: list | None):
    record = read_latest(save_root)
    if record is not None:
        names = record.engines if engine_names is None else engine_names
        if set(names) != set(record.engines):
            raise CheckpointConsistencyError(f"engines {record.engines} != {names}")
        generation = generation_dir(save_root, record.global_step)
        payloads = {n: payload_dir(generation, n) for n in names}
        missing = [
            p
            for p in [manifest_dir(generation), *payloads.values()]
            if not os.path.isdir(p)
        ]
        if missing:
            raise CheckpointConsistencyError(f"missing paths: {missing}")
        return ResumeSource(manifest_dir(generation), payloads, "pointer", True)
    manifest = os.path.join(save_root, "recover_info")
    if not os.path.isdir(manifest):
        return None
    payloads = {
        n: os.path.join(save_root, n, "recover_checkpoint") for n in engine_names or []
    }
    return ResumeSource(manifest, payloads, "legacy", False)
