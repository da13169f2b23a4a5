# SPDX-License-Identifier: Apache-2.0
"""allocation_mode and the training engines' backends, made to agree.

AReaL's SPMD launchers start allocation_mode's training part's world size of
trainer processes; PPOTrainer builds each training engine from its own
``<engine>.backend`` (areal_compat.TRAIN_ENGINE_KEYS). Where the two differ every
process dies building its device mesh. Here they are made to agree, once, for the
launchers (before any process starts) and for load_expr_config (every mode).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from omegaconf import OmegaConf

from areal_debug import areal_compat

TRAIN_BACKENDS = ("fsdp", "megatron", "archon")
# AReaL 0.x style: parallel dimensions with no backend prefix, e.g. "d4p1t1".
BARE_DIMS = re.compile(r"^(?:[dptce]\d+)+$")
_PLAIN_VALUE = re.compile(r"^[\w:.+-]*$")


class AllocationConflictError(ValueError):
    """allocation_mode and a training engine's backend cannot both hold, or
    allocation_mode cannot be read: found before any process starts."""


@dataclass
class BackendAgreement:
    """What makes every training engine's backend agree with allocation_mode."""

    # allocation_mode to use: as given, its 0.x form read, or its training part
    # set from a command-line backend; "" when none is given.
    allocation: str
    # Backends to set (``actor.backend`` -> ``fsdp:d2``): YAML values only.
    backends: dict[str, str] = field(default_factory=dict)
    # What was read or changed, for the log.
    notes: list[str] = field(default_factory=list)


def override_key(arg: str) -> str | None:
    """The key a hydra override sets (``k=v``, ``+k=v``, ``++k=v``), else None."""
    if arg.startswith("-") or "=" not in arg:
        return None
    return arg.split("=", 1)[0].lstrip("+~").strip() or None


def command_line_keys(argv: list[str]) -> set[str]:
    """The config keys ``argv`` (script, ``--config X``, overrides) sets."""
    keys, after_config = set(), False
    for arg in argv:
        if not after_config and (key := override_key(arg)):
            keys.add(key)
        after_config = arg == "--config"
    return keys


def hydra_override(key: str, value: str) -> str:
    """``++key=value`` (add or override), quoted where hydra's grammar needs it
    (``fsdp[actor]:d4``, ``megatron:(attn:...|ffn:...)``)."""
    return f"++{key}={value}" if _PLAIN_VALUE.match(value) else f"++{key}='{value}'"


def backend_of(spec: str) -> str:
    """``fsdp`` of ``fsdp:d4``, ``fsdp[actor]:d4``."""
    return re.split(r"[\[:]", spec, maxsplit=1)[0].strip()


def read_bare_allocation(alloc: str, actor_backend: str) -> tuple[str, str | None]:
    """``(allocation, note)``: a bare ``d4p1t1`` (AReaL 0.x style) read as the
    training allocation with ``actor_backend``'s backend (fsdp if it has none),
    and a note saying so; any other allocation as it is, with no note."""
    if not BARE_DIMS.match(alloc):
        return alloc, None
    backend = backend_of(actor_backend)
    read = f"{backend if backend in TRAIN_BACKENDS else 'fsdp'}:{alloc}"
    return read, (
        f"allocation_mode={alloc} has no backend prefix (AReaL 0.x style); "
        f"read as the training allocation {read}."
    )


def allocation_parts(alloc: str) -> list[str]:
    """The parts of ``alloc`` between top-level ``+`` and ``|`` (not those inside
    a Megatron ``(attn:...|ffn:...)``), empty ones left out."""
    return [alloc[s:e] for s, e in _components(alloc) if alloc[s:e].strip()]


def _components(alloc: str) -> list[tuple[int, int]]:
    """(start, end) of each part of ``alloc`` split at top-level ``+`` and ``|``."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(alloc + "+"):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch in "+|":
            spans.append((start, i))
            start = i + 1
    return spans


def _select(cfg, key: str):
    try:
        return OmegaConf.select(cfg, key, default=None)
    except Exception:  # noqa: BLE001 - a missing or broken interpolation: unset
        return None


def _same(a, b: str) -> bool:
    try:
        return bool(a) and areal_compat.same_model_allocation(str(a), b)
    except Exception:  # noqa: BLE001 - a backend AReaL cannot read agrees with nothing
        return False


def _training_engines(cfg) -> list[str]:
    """The training engines ``cfg`` has (a teacher's train side when it is used)."""
    return [
        key
        for key in areal_compat.TRAIN_ENGINE_KEYS
        if _select(cfg, key) is not None
        and (key != "teacher.train" or _select(cfg, "teacher.engine_type") == "train")
    ]


def _check_readable(alloc: str, where: str) -> None:
    """AReaL's parser on ``alloc``; what it rejects is refused, saying what to do."""
    try:
        areal_compat.parse_allocation(alloc)
    except Exception as e:  # noqa: BLE001 - AReaL's parser raises several types
        raise AllocationConflictError(
            f"allocation_mode={alloc} ({where}) is not an allocation AReaL accepts: "
            f"{str(e).splitlines()[0].rstrip('.')}. The launchers and areal-debug "
            "read the training layout from it. Fix it (e.g. "
            "allocation_mode=sglang:d4+fsdp:d4, or fsdp:d4 to train only), or empty "
            "it (++allocation_mode=) to use each engine's own *.backend."
        ) from e


def agree_with_allocation(
    cfg, argv: list[str], allocation: str | None = None
) -> BackendAgreement:
    """Make every training engine's ``*.backend`` agree with allocation_mode.

    ``cfg`` is the composed config (left unchanged), ``argv`` the command line it
    was composed from (a value set there is told from the YAML's), ``allocation``
    allocation_mode when not ``cfg``'s own. Who wins: a YAML backend yields to
    allocation_mode; a command-line backend that differs from a YAML
    allocation_mode sets its training part; two command-line values that differ,
    an allocation AReaL cannot read and one with several training parts are
    refused (AllocationConflictError), saying what to do.
    """
    if allocation is None:
        allocation = str(_select(cfg, "allocation_mode") or "")
    alloc = allocation.strip()
    if not alloc:
        return BackendAgreement("")
    given = command_line_keys(argv)
    where = "command line" if "allocation_mode" in given else "the YAML"
    alloc, note = read_bare_allocation(alloc, str(_select(cfg, "actor.backend") or ""))
    notes = [note] if note else []
    _check_readable(alloc, where)
    train = [
        (start, end)
        for start, end in _components(alloc)
        if backend_of(alloc[start:end]) in TRAIN_BACKENDS
    ]
    if not train:  # inference servers only: nothing trains
        return BackendAgreement(alloc, notes=notes)
    if len(train) > 1:
        raise AllocationConflictError(
            f"allocation_mode={alloc} ({where}) has {len(train)} training parts "
            f"({', '.join(alloc[s:e] for s, e in train)}): AReaL's SPMD launchers "
            "run every training engine in one set of trainer processes, so "
            "areal-debug gives them all the one training part. Give one (e.g. "
            "allocation_mode=sglang:d4+fsdp:d4), or empty allocation_mode "
            "(++allocation_mode=) and set each engine's *.backend."
        )
    start, end = train[0]
    spec = re.sub(r"\[\w*\]", "", alloc[start:end], count=1).strip()
    work = copy.deepcopy(cfg)
    engines = _training_engines(work)
    asked = {
        k: str(_select(work, f"{k}.backend"))
        for k in engines
        if any(f"{k}.backend" == g or f"{k}.backend".startswith(g + ".") for g in given)
    }
    first = next(iter(asked.items()), None)
    for key, value in list(asked.items())[1:]:
        if not _same(value, first[1]):
            raise AllocationConflictError(
                f"{first[0]}.backend={first[1]} and {key}.backend={value} (both on "
                f"the command line) ask for different training layouts, while "
                f"allocation_mode={alloc} ({where}) gives every training engine "
                "one: AReaL's SPMD launchers run them all in the same trainer "
                "processes. Give them the same layout, or leave one out "
                "(allocation_mode then sets it)."
            )
    if first is not None and not _same(first[1], spec):
        key, value = first
        name = re.match(r"^\s*\w*(\[\w*\])?", alloc[start:end]).group(1) or ""
        part = backend_of(value) + name + value[len(backend_of(value)) :]
        wanted = alloc[:start] + part + alloc[end:]
        if where == "command line":
            raise AllocationConflictError(
                f"{key}.backend={value} and allocation_mode={alloc} (both on the "
                f"command line) ask for different training layouts ({value} vs "
                f"{spec}). AReaL's SPMD launchers start one trainer process per "
                f"rank of allocation_mode's training part while AReaL builds the "
                f"{key} engine from {key}.backend alone: apart, every process "
                f"fails building its device mesh. Drop {key}.backend={value} "
                f"(allocation_mode then sets it), or ask for one layout: "
                f"allocation_mode={wanted}."
            )
        notes.append(
            f"{key}.backend={value} (command line) sets the training part of the "
            f"YAML's allocation_mode: {alloc} -> {wanted}."
        )
        alloc, spec, where = wanted, value, f"{key}.backend on the command line"
    backends, changed = {}, []
    for key in engines:
        old = _select(work, f"{key}.backend")
        if key in asked or _same(old, spec):
            continue
        OmegaConf.update(work, f"{key}.backend", spec, force_add=True)
        backends[f"{key}.backend"] = spec
        changed.append(f"{key}.backend {old or '(unset)'} -> {spec}")
    if changed:
        notes.append(
            f"allocation_mode={alloc} ({where}) sets the training engines' layout, "
            f"replacing the YAML's: {', '.join(changed)}."
        )
    return BackendAgreement(alloc, backends, notes)
