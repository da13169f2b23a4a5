# SPDX-License-Identifier: Apache-2.0
"""Where a recording is and which trial a replay runs under."""

from __future__ import annotations

import dataclasses
import os

from areal_debug import areal_compat
from areal_debug.config.debug_config import REPLAY_TRIAL_SUFFIX, DebugConfig
from areal_debug.recording.format import (
    RECORDING_DIRNAME,
    REPLAY_REPORT_NAME,
)


def default_recording_path(fileroot: str, experiment_name: str, trial_name: str) -> str:
    return os.path.join(fileroot, experiment_name, trial_name, RECORDING_DIRNAME)


def _rename_trial(obj, old: str, new: str, seen: set[int]) -> None:
    """Set every nested ``trial_name`` equal to ``old`` to ``new``.

    AReaL copies the trial name into each sub-config (stats_logger, saver,
    recover, engines...), usually through ``${trial_name}`` interpolation that
    is already resolved here, so all copies must move together.
    """
    if id(obj) in seen or not dataclasses.is_dataclass(obj):
        return
    seen.add(id(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "trial_name" and value == old:
            setattr(obj, f.name, new)
        elif dataclasses.is_dataclass(value):
            _rename_trial(value, old, new, seen)
        elif isinstance(value, (list, tuple)):
            for item in value:
                _rename_trial(item, old, new, seen)


def replay_trial(fileroot: str, experiment: str, trial: str) -> str:
    """The trial a replay of ``trial`` runs under when none is named:
    ``<trial>_replay``, or the first ``<trial>_replay<N>`` (N = 2, 3, ...) whose
    log directory holds no replay report, so a second replay (another setting,
    another AReaL) keeps the first one's report beside its own.

    Every process of a replay (launcher, torchrun ranks, controller) decides
    alike: the report is written after the first step, when all have started.
    """
    base = trial + REPLAY_TRIAL_SUFFIX
    n = 1
    while True:
        name = base if n == 1 else f"{base}{n}"
        log_dir = areal_compat.trial_log_dir(fileroot, experiment, name)
        if not os.path.exists(os.path.join(log_dir, REPLAY_REPORT_NAME)):
            return name
        n += 1


def recorded_trial_of(replay_trial: str) -> str:
    """The recorded run's trial a default replay trial name was made from
    (``<trial>_replay``, ``<trial>_replay2``, ...); any other name as it is."""
    base, suffix, rest = replay_trial.rpartition(REPLAY_TRIAL_SUFFIX)
    return base if suffix and (rest == "" or rest.isdigit()) else replay_trial


def earlier_replays_note(trial: str, replay_trial_name: str) -> str | None:
    """What a replay run under a fresh trial says (None under the first one)."""
    base = trial + REPLAY_TRIAL_SUFFIX
    rest = replay_trial_name[len(base) :]
    if not replay_trial_name.startswith(base) or not rest.isdigit():
        return None
    earlier = ", ".join([base] + [f"{base}{n}" for n in range(2, int(rest))])
    return (
        f"Replay: runs as trial {replay_trial_name}; the earlier replays' reports "
        f"({earlier}) are kept. debug.replay_trial_name=NAME names a replay."
    )


def replaced_report_note(replay_trial_name: str, report: str) -> str:
    """What a replay named onto an earlier replay's trial says: it replaces that
    replay's report (a person asked for it, but may not know)."""
    return (
        f"Replay: replaces the earlier replay's report {report}: "
        f"debug.replay_trial_name={replay_trial_name} names that replay's trial. "
        "Leave it unset for a trial of its own."
    )


def resolve_debug_config(cfg) -> None:
    """Fill in ``debug.path`` and move a replay to its own trial (in place)."""
    debug: DebugConfig = cfg.debug
    if not debug.enabled:
        return
    if debug.path is None:
        debug.path = default_recording_path(
            cfg.cluster.fileroot, cfg.experiment_name, cfg.trial_name
        )
    if not debug.replay_rollout_data:
        return
    if debug.replay_trial_name is None:
        debug.replay_trial_name = replay_trial(
            cfg.cluster.fileroot, cfg.experiment_name, cfg.trial_name
        )
    if debug.replay_trial_name != cfg.trial_name:
        _rename_trial(cfg, cfg.trial_name, debug.replay_trial_name, set())
