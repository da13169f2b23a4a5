# SPDX-License-Identifier: Apache-2.0
"""What a recording's ``manifest.json`` says: typed, with JSON in and out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SPMD = "spmd"
SINGLE_CONTROLLER = "single-controller"
# Far above any real run (a shard per data-parallel head), far below a number
# that would keep a reader looping over shards for ever.
MAX_SHARDS = 1 << 16


def _typed(data: dict, name: str, types, required: bool, default=None):
    if name not in data:
        if required:
            raise ValueError(f"missing key {name!r}")
        return default
    value = data[name]
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, types):
        raise ValueError(f"{name!r} has the wrong type: {value!r}")
    return value


def _flag(data: dict, name: str) -> bool:
    value = data.get(name, False)
    if not isinstance(value, bool):
        raise ValueError(f"{name!r} must be true or false, got {value!r}")
    return value


@dataclass
class Layout:
    """How the dump run produced its batches: one shard per DP head (SPMD) or one
    per step on the controller (single-controller)."""

    num_shards: int
    steps_per_epoch: int
    mode: str = SPMD
    world_size: int | None = None
    # Absent in recordings of areal-debug < 0.2: then equal to num_shards.
    train_dp_size: int | None = None
    actor_backend: str | None = None
    rollout_backend: str | None = None

    @property
    def training_dp_size(self) -> int:
        return self.train_dp_size if self.train_dp_size is not None else self.num_shards

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Layout:
        if not isinstance(data, dict):
            raise ValueError(f"'layout' must be an object, got {data!r}")
        layout = cls(
            num_shards=_typed(data, "num_shards", int, True),
            steps_per_epoch=_typed(data, "steps_per_epoch", int, True),
            mode=_typed(data, "mode", str, False, SPMD),
            world_size=_typed(data, "world_size", int, False),
            train_dp_size=_typed(data, "train_dp_size", int, False),
            actor_backend=_typed(data, "actor_backend", str, False),
            rollout_backend=_typed(data, "rollout_backend", str, False),
        )
        if not 1 <= layout.num_shards <= MAX_SHARDS or layout.steps_per_epoch < 1:
            raise ValueError(
                f"num_shards must be 1..{MAX_SHARDS} and steps_per_epoch >= 1, got "
                f"{layout.num_shards} and {layout.steps_per_epoch}"
            )
        if layout.mode not in (SPMD, SINGLE_CONTROLLER):
            raise ValueError(
                f"layout mode {layout.mode!r} is not one of {[SPMD, SINGLE_CONTROLLER]}"
            )
        return layout


@dataclass
class Manifest:
    """A recording's identity, layout, versions and the dump run's config."""

    format_version: int
    experiment_name: str
    trial_name: str
    layout: Layout
    created: str = ""
    areal_debug_version: str | None = None
    areal_version: str | None = None
    # Which AReaL beyond its version (areal_compat.installed_areal_build):
    # version, commit where known, a digest of its installed files.
    areal_build: dict[str, Any] = field(default_factory=dict)
    torch_version: str | None = None
    python_version: str | None = None
    determinism: dict[str, Any] = field(default_factory=dict)
    # Single-controller mode: what each RPC worker reported running with.
    worker_determinism: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    # Each step also holds the teacher's log-probs (teacher.engine_type=rollout).
    recorded_teacher_logp: bool = False
    # The seams the dump run's AReaL lacked (areal_compat.seams.MissingSeam:
    # seam, problem, capability): what the recording does not hold.
    missing_seams: list[dict[str, Any]] = field(default_factory=list)
    # Written when the dump run closes (compare.coverage.Coverage.to_json): the
    # steps then kept and what they lack; None until then (a killed run).
    coverage: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["layout"] = self.layout.to_json()
        if not out["areal_build"]:  # recordings of earlier releases have none
            del out["areal_build"]
        if not out["missing_seams"]:  # nor this, where nothing was missing
            del out["missing_seams"]
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """Raises ValueError naming the first bad key."""
        if not isinstance(data, dict):
            raise ValueError(f"the manifest must be a JSON object, got {data!r}")
        return cls(
            format_version=_typed(data, "format_version", int, True),
            experiment_name=_typed(data, "experiment_name", str, True),
            trial_name=_typed(data, "trial_name", str, True),
            layout=Layout.from_json(data.get("layout")),
            created=_typed(data, "created", str, False, ""),
            areal_debug_version=_typed(data, "areal_debug_version", str, False),
            areal_version=_typed(data, "areal_version", str, False),
            areal_build=_typed(data, "areal_build", dict, False, {}) or {},
            torch_version=_typed(data, "torch_version", str, False),
            python_version=_typed(data, "python_version", str, False),
            determinism=_typed(data, "determinism", dict, False, {}) or {},
            worker_determinism=_typed(data, "worker_determinism", list, False, [])
            or [],
            config=_typed(data, "config", dict, False, {}) or {},
            recorded_teacher_logp=_flag(data, "recorded_teacher_logp"),
            missing_seams=_typed(data, "missing_seams", list, False, []) or [],
            coverage=_typed(data, "coverage", dict, False),
        )
