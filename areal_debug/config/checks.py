# SPDX-License-Identifier: Apache-2.0
"""Checks of a command line and a composed config before any process starts."""

from __future__ import annotations

import dataclasses
import os

from omegaconf import OmegaConf

from areal_debug import areal_compat
from areal_debug.allocation import override_key
from areal_debug.config.debug_config import DebugConfig, DebugConfigError
from areal_debug.config.trials import default_recording_path
from areal_debug.recording.format import (
    MANIFEST,
    recording_below,
)


def check_debug_keys(argv: list[str]) -> None:
    """Every ``debug.*`` override names a debug key: a typo
    (``debug.replay_end_stpe``) is refused with the closest names and the list,
    not left to the config loader's ``ConfigKeyError`` after AReaL has loaded."""
    import difflib

    known = [f.name for f in dataclasses.fields(DebugConfig)]
    for arg in argv:
        key = override_key(arg)
        if key is None or not key.startswith("debug."):
            continue
        name = key.removeprefix("debug.").split(".", 1)[0]
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = (
            "Did you mean " + " or ".join(f"debug.{c}" for c in close) + "? "
            if close
            else ""
        )
        raise DebugConfigError(
            f"{arg!r}: debug.{name} is not a debug key. {hint}The debug keys are: "
            + ", ".join(known)
            + "."
        )


def _field_type(cls, name: str):
    """The annotation of ``cls``'s field ``name``, or None where it cannot be
    resolved (a forward reference AReaL never imports)."""
    import typing

    try:
        return typing.get_type_hints(cls)[name]
    except Exception:  # noqa: BLE001 - any unresolvable annotation: stop walking
        return None


def _dataclass_in(hint):
    """The dataclass ``hint`` names (itself, or inside Optional/Union), else None."""
    import typing

    for t in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(t):
            return t
    return None


def _free_keys(hint) -> bool:
    """Whether a field of type ``hint`` takes keys of any name (a dict, Any)."""
    import typing

    return any(
        t is typing.Any or t is dict or typing.get_origin(t) is dict
        for t in (hint, *typing.get_args(hint))
    )


def _resolves(cls, parts: list[str]) -> bool:
    """Whether ``parts`` is a key of ``cls``: a field at each level, down to the
    last part or to a field whose keys are free (a dict, Any)."""
    for i, part in enumerate(parts):
        if part not in {f.name for f in dataclasses.fields(cls)}:
            return False
        hint = _field_type(cls, part)
        inner = _dataclass_in(hint)
        if inner is None:
            return i == len(parts) - 1 or _free_keys(hint)
        cls = inner
    return True


def unknown_key_hint(argv: list[str], config_cls) -> str | None:
    """The first override of ``argv`` whose key ``config_cls`` (AReaL's config
    dataclasses) does not have, with the closest keys that exist, in one line;
    None where every key walks. For after a composition failed: hydra's own
    message suggests ``+KEY`` (add it), which for a typo is the wrong fix.
    ``debug.*`` keys are ``check_debug_keys``'; ``+``/``~`` overrides add or
    delete keys on purpose."""
    import difflib

    for arg in argv:
        key = override_key(arg)
        if key is None or arg.startswith(("+", "~")) or key.startswith("debug."):
            continue
        parts, cls = key.split("."), config_cls
        for i, part in enumerate(parts):
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                close = difflib.get_close_matches(part, names, n=5, cutoff=0.6)
                fixes = [
                    ".".join([*parts[:i], c, *parts[i + 1 :]])
                    for c in close
                    if _resolves(config_cls, [*parts[:i], c, *parts[i + 1 :]])
                ][:3]
                owner = ".".join(parts[:i]) or "the config"
                hint = f"; did you mean {' or '.join(fixes)}?" if fixes else "."
                return f"{arg!r}: {owner} has no key {part!r}{hint}"
            cls = _dataclass_in(_field_type(cls, part))
            if cls is None:
                break
    return None


def check_debug_section(cfg) -> str | None:
    """The composed config's ``debug:`` section checked as the trainer will
    check it (``DebugConfig``'s own validation), before any process starts.
    Returns the recording a replay reads (``check_recording`` it), else None."""
    section = OmegaConf.select(cfg, "debug", default=None)
    if section is None:
        return None
    values = OmegaConf.to_container(section, resolve=True) or {}
    try:
        debug = DebugConfig(**values)
    except (TypeError, ValueError) as e:
        raise DebugConfigError(str(e)) from None
    if not debug.replay_rollout_data:
        return None
    return debug.path or default_recording_path(
        str(OmegaConf.select(cfg, "cluster.fileroot")),
        str(OmegaConf.select(cfg, "experiment_name")),
        str(OmegaConf.select(cfg, "trial_name")),
    )


def refuse_controller_v2(cfg) -> None:
    """AReaL's v2 controllers (``rollout._version=v2``) are refused in dump and
    replay, before any process starts, with why and what to run instead."""

    keys = areal_compat.controller_v2_keys(cfg)
    if not keys:
        return
    raise DebugConfigError(
        f"{' and '.join(f'{k}=v2' for k in keys)}: AReaL's v2 controllers "
        "(RolloutControllerV2, the gateway and data-proxy inference service) are not "
        "supported by areal-debug: their trajectories come back from the data proxy, "
        "not through the rollout engine's prepare_batch that a dump records and a "
        "replay stands in for, so a replay could not run without the inference "
        "service. Record and replay with the v1 controllers (rollout._version=v1 "
        "actor._version=v1, AReaL's default), or turn debug.dump_rollout_data off "
        "for this run."
    )


def check_recording(path: str) -> None:
    """A replay's ``debug.path`` holds a recording, or says where one is."""
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return
    below = recording_below(path)
    if below is not None:
        raise DebugConfigError(
            f"debug.path={path} is not a recording, but it holds one: "
            f"{below}. Set debug.path={below}."
        )
    what = "does not exist" if not os.path.exists(path) else "holds no manifest.json"
    raise DebugConfigError(
        f"No recording to replay at debug.path={path}: it {what}. Point debug.path "
        "at the directory a dump run wrote (areal-debug ls FILEROOT lists them), or "
        "record one first with debug.dump_rollout_data=true."
    )
