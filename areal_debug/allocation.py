# SPDX-License-Identifier: Apache-2.0
"""The one allocation planner: what a run trains on, serves and drops.

AReaL's SPMD launchers start allocation_mode's training part's world size of
trainer processes; PPOTrainer builds each training engine from its own
``<engine>.backend`` (areal_compat.TRAIN_ENGINE_KEYS). Where the two differ every
process dies building its device mesh. ``plan_allocation`` makes them agree, once,
and says what the run uses, for every caller:

- ``"run"``: load_expr_config and ``areal-debug doctor`` (every mode, the
  single-controller runs and SPMD runs not started by areal-debug's launchers);
- ``"launch"``: the launchers, dump mode and debug off (an empty allocation_mode is
  made from rollout.backend and actor.backend; running servers drop the serving part);
- ``"replay"``: the launchers in replay mode, and doctor's topology check: only the
  training part runs.

Whatever cannot hold is refused with one error type, ``AllocationError``, before
any process starts, saying what to do. AReaL's grammar (which
parts train, which serve, a part's backend and name) and its parser are reached
through ``areal_compat``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf, open_dict

from areal_debug import areal_compat

MODES = ("run", "launch", "replay")
_PLAIN_VALUE = re.compile(r"^[\w:.+-]*$")
SERVER_ADDRS_ENV = "AREAL_LLM_SERVER_ADDRS"


class AllocationError(ValueError):
    """An allocation_mode a run cannot use (unreadable, no training part, in
    conflict with a training engine's backend, ...): found before any process
    starts."""


@dataclass(frozen=True)
class AllocationPlan:
    """What a run's allocation is, once planned."""

    # allocation_mode as given ("" when none).
    requested: str
    # allocation_mode the run uses ("" when none).
    allocation: str
    # Its training part(s) and its serving part(s).
    train: str = ""
    serves: tuple[str, ...] = ()
    # What a replay (or a run on running servers) drops of the requested allocation.
    dropped: tuple[str, ...] = ()
    # Backends to set (``actor.backend`` -> ``fsdp:d2``).
    backends: Mapping[str, str] = field(default_factory=dict)
    # What was read or changed, to say once.
    notes: tuple[str, ...] = ()
    # Whether allocation_mode is written (the config and the command line).
    rewrites: bool = False

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` with the overrides that give the plan to a process that
        composes its config from it."""
        extra = [hydra_override(k, v) for k, v in self.backends.items()]
        if not self.rewrites:
            return [*argv, *extra]
        kept = [a for a in argv if override_key(a) != "allocation_mode"]
        return [*kept, *extra, hydra_override("allocation_mode", self.allocation)]

    def apply(self, cfg: DictConfig) -> None:
        """The plan set in a composed config (a launcher's own copy)."""
        for key, value in self.backends.items():
            OmegaConf.update(cfg, key, value, force_add=True)
        if self.rewrites:
            # AReaL's example YAMLs lack the key, and the composed config is a struct.
            with open_dict(cfg):
                cfg.allocation_mode = self.allocation

    @property
    def train_world_size(self) -> int:
        return areal_compat.allocation_train_world_size(self.train)

    @property
    def train_dp_size(self) -> int:
        return areal_compat.allocation_train_dp_size(self.train)


def plan_allocation(
    config, argv: list[str], mode: str, running_servers: str = ""
) -> AllocationPlan:
    """The allocation a run of ``config`` uses in ``mode`` (``MODES``).

    ``config`` is the composed config (a DictConfig or a loaded config object,
    left unchanged), ``argv`` the command line it was composed from (a value set
    there is told from the YAML's). Who wins: a YAML backend yields to
    allocation_mode; a command-line backend that differs from a YAML
    allocation_mode sets its training part; two command-line values that differ,
    an allocation AReaL cannot read and one with several training parts are
    refused (AllocationError). ``running_servers`` (launch mode): the addresses
    of servers already running, so the serving part is dropped.
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")
    requested = str(_select(config, "allocation_mode") or "").strip()
    if requested:
        alloc, backends, notes = _agree(config, argv, requested)
    elif mode == "run":
        return AllocationPlan("", "")
    else:
        alloc, backends = _from_backends(config), {}
        notes = [
            f"allocation_mode is empty (AReaL 1.0 declares backends per engine): "
            f"using {alloc!r} from rollout.backend and actor.backend."
        ]
    rewrites = alloc != requested
    final = alloc
    if mode == "replay" or (mode == "launch" and running_servers):
        final = _training_part(alloc)
        if mode == "replay":
            notes.append(
                f"Replay: allocation_mode {requested or alloc!r} -> {final!r}; "
                "no inference server is started."
            )
            rewrites = True
        elif final != alloc:
            notes.append(
                f"{SERVER_ADDRS_ENV}={running_servers} is set: the trainer uses "
                f"those running servers; no server is started (allocation "
                f"{alloc!r} -> {final!r})."
            )
            rewrites = True
    parts = allocation_parts(final)
    train = [p.strip() for p in parts if backend_of(p) in areal_compat.TRAIN_BACKENDS]
    serves = tuple(
        p.strip() for p in parts if backend_of(p) not in areal_compat.TRAIN_BACKENDS
    )
    dropped = tuple(
        p.strip() for p in allocation_parts(alloc) if p.strip() not in train
    )
    return AllocationPlan(
        requested=requested,
        allocation=final,
        train="+".join(train),
        serves=serves,
        dropped=dropped if final != alloc else (),
        backends=backends,
        notes=tuple(notes),
        rewrites=rewrites,
    )


# -- the command line --------------------------------------------------------------------
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


# -- allocation strings ------------------------------------------------------------------
def backend_of(spec: str) -> str:
    """``fsdp`` of ``fsdp:d4``, ``fsdp[actor]:d4``."""
    return areal_compat.allocation_backend(spec)


def read_bare_allocation(alloc: str, actor_backend: str) -> tuple[str, str | None]:
    """``(allocation, note)``: a bare ``d4p1t1`` (AReaL 0.x style) read as the
    training allocation with ``actor_backend``'s backend (fsdp if it has none),
    and a note saying so; any other allocation as it is, with no note."""
    if not areal_compat.is_bare_allocation(alloc):
        return alloc, None
    backend = backend_of(actor_backend)
    read = f"{backend if backend in areal_compat.TRAIN_BACKENDS else 'fsdp'}:{alloc}"
    return read, (
        f"allocation_mode={alloc} has no backend prefix (AReaL 0.x style); "
        f"read as the training allocation {read}."
    )


def allocation_parts(alloc: str) -> list[str]:
    """The parts of ``alloc`` between top-level ``+`` and ``|`` (not those inside
    a Megatron ``(attn:...|ffn:...)``), empty ones left out."""
    return [
        alloc[s:e]
        for s, e in areal_compat.allocation_spans(alloc)
        if alloc[s:e].strip()
    ]


def _check_readable(alloc: str, what: str, hint: str) -> None:
    """AReaL's parser on ``alloc``; what it rejects is refused, saying ``what``
    was read and ``hint`` (what to do)."""
    try:
        areal_compat.parse_allocation(alloc)
    except Exception as e:  # noqa: BLE001 - AReaL's parser raises several types
        raise AllocationError(
            f"{what} is not an allocation AReaL accepts: "
            f"{str(e).splitlines()[0].rstrip('.')}. {hint}"
        ) from e


def _from_backends(cfg) -> str:
    """The allocation AReaL 1.0's per-engine backends declare, for the SPMD
    launchers, which still parse ``allocation_mode``: ``rollout.backend`` and
    ``actor.backend`` joined (``sglang:d4p1t1+fsdp:d4p1t1``)."""
    rollout_backend = _select(cfg, "rollout.backend")
    actor_backend = _select(cfg, "actor.backend")
    actor = str(actor_backend or "").strip()
    if not actor:
        raise AllocationError(
            "allocation_mode is empty and actor.backend is not set, so the launcher "
            "cannot tell how many trainer processes to start. Set actor.backend "
            "(e.g. actor.backend=fsdp:d4, with rollout.backend=sglang:d4 for the "
            "servers), or ++allocation_mode=sglang:d4+fsdp:d4."
        )
    parts = [p for p in (str(rollout_backend or "").strip(), actor) if p]
    alloc = "+".join(parts)
    _check_readable(
        alloc,
        f"allocation_mode is empty; rollout.backend={rollout_backend!r} and "
        f"actor.backend={actor_backend!r} make {alloc!r}, which",
        "Set ++allocation_mode=... explicitly.",
    )
    return alloc


def _training_part(alloc: str) -> str:
    """The training part of a readable ``alloc``: ``sglang:d4p1t1+fsdp:d4p1t1`` ->
    ``fsdp:d4p1t1``; names and colocation (``sglang[r]:d2|fsdp[a]:d2`` ->
    ``fsdp[a]:d2``) are kept."""
    components = allocation_parts(alloc)
    train = [
        c.strip() for c in components if backend_of(c) in areal_compat.TRAIN_BACKENDS
    ]
    if not train:
        raise AllocationError(
            f"allocation_mode={alloc!r} has no training part (only "
            f"{sorted({backend_of(c) for c in components})}): a replay runs only "
            "the trainer. Give the training allocation, e.g. "
            "++allocation_mode=fsdp:d4, or ++allocation_mode=sglang:d4+fsdp:d4."
        )
    result = "+".join(train)
    _check_readable(
        result,
        f"allocation_mode={result!r}",
        "Use e.g. ++allocation_mode=sglang:d4+fsdp:d4 or ++allocation_mode=fsdp:d4.",
    )
    return result


# -- the training engines' backends ------------------------------------------------------
def _select(cfg, key: str):
    """``cfg``'s value at the dotted ``key`` (a DictConfig or a loaded config
    object), None where it is unset."""
    if isinstance(cfg, DictConfig):
        try:
            return OmegaConf.select(cfg, key, default=None)
        except Exception:  # noqa: BLE001 - a missing or broken interpolation: unset
            return None
    for name in key.split("."):
        cfg = getattr(cfg, name, None)
        if cfg is None:
            return None
    return cfg


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


def _agree(cfg, argv: list[str], alloc: str) -> tuple[str, dict[str, str], list[str]]:
    """``(allocation, backends to set, notes)`` that make every training engine's
    ``*.backend`` agree with ``alloc``; AllocationError where they cannot."""
    given = command_line_keys(argv)
    where = "command line" if "allocation_mode" in given else "the YAML"
    alloc, note = read_bare_allocation(alloc, str(_select(cfg, "actor.backend") or ""))
    notes = [note] if note else []
    _check_readable(
        alloc,
        f"allocation_mode={alloc} ({where})",
        "The launchers and areal-debug read the training layout from it. Fix it "
        "(e.g. allocation_mode=sglang:d4+fsdp:d4, or fsdp:d4 to train only), or "
        "empty it (++allocation_mode=) to use each engine's own *.backend.",
    )
    train = [
        (start, end)
        for start, end in areal_compat.allocation_spans(alloc)
        if backend_of(alloc[start:end]) in areal_compat.TRAIN_BACKENDS
    ]
    if not train:  # inference servers only: nothing trains
        return alloc, {}, notes
    if len(train) > 1:
        raise AllocationError(
            f"allocation_mode={alloc} ({where}) has {len(train)} training parts "
            f"({', '.join(alloc[s:e] for s, e in train)}): AReaL's SPMD launchers "
            "run every training engine in one set of trainer processes, so "
            "areal-debug gives them all the one training part. Give one (e.g. "
            "allocation_mode=sglang:d4+fsdp:d4), or empty allocation_mode "
            "(++allocation_mode=) and set each engine's *.backend."
        )
    start, end = train[0]
    spec = areal_compat.unnamed_allocation(alloc[start:end])
    # A copy to set the backends in: one may follow another by interpolation.
    work = copy.deepcopy(cfg) if isinstance(cfg, DictConfig) else cfg
    engines = _training_engines(work)
    asked = {
        k: str(_select(work, f"{k}.backend"))
        for k in engines
        if any(f"{k}.backend" == g or f"{k}.backend".startswith(g + ".") for g in given)
    }
    first = next(iter(asked.items()), None)
    for key, value in list(asked.items())[1:]:
        if not _same(value, first[1]):
            raise AllocationError(
                f"{first[0]}.backend={first[1]} and {key}.backend={value} (both on "
                f"the command line) ask for different training layouts, while "
                f"allocation_mode={alloc} ({where}) gives every training engine "
                "one: AReaL's SPMD launchers run them all in the same trainer "
                "processes. Give them the same layout, or leave one out "
                "(allocation_mode then sets it)."
            )
    if first is not None and not _same(first[1], spec):
        key, value = first
        name = areal_compat.allocation_name(alloc[start:end])
        part = backend_of(value) + name + value[len(backend_of(value)) :]
        wanted = alloc[:start] + part + alloc[end:]
        if where == "command line":
            raise AllocationError(
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
        if work is not cfg:
            OmegaConf.update(work, f"{key}.backend", spec, force_add=True)
        backends[f"{key}.backend"] = spec
        changed.append(f"{key}.backend {old or '(unset)'} -> {spec}")
    if changed:
        notes.append(
            f"allocation_mode={alloc} ({where}) sets the training engines' layout, "
            f"replacing the YAML's: {', '.join(changed)}."
        )
    return alloc, backends, notes
