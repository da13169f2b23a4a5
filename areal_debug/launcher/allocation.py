# SPDX-License-Identifier: Apache-2.0
"""The training part of an AReaL allocation string, for replay runs."""

from __future__ import annotations

from areal_debug.areal_compat import parse_allocation
from areal_debug.backend_agreement import (
    TRAIN_BACKENDS,
    allocation_parts,
    read_bare_allocation,
)
from areal_debug.backend_agreement import backend_of as _backend_of

GEN_BACKENDS = ("sglang", "vllm")


class AllocationError(ValueError):
    """An allocation_mode a replay cannot run."""


def _validate(alloc: str, what: str | None = None, hint: str | None = None) -> None:
    """AReaL's parser on ``alloc``; its error becomes an AllocationError saying
    ``what`` was parsed and ``hint`` (what to do)."""
    try:
        parse_allocation(alloc)
    except Exception as e:  # noqa: BLE001 - AReaL's parser raises several types
        raise AllocationError(
            f"{what or f'allocation_mode={alloc!r}'} is not an allocation AReaL "
            f"accepts: {str(e).splitlines()[0]}. "
            + (
                hint
                or "Use e.g. ++allocation_mode=sglang:d4+fsdp:d4 or "
                "++allocation_mode=fsdp:d4."
            )
        ) from e


def training_allocation(
    alloc: str, actor_backend: str | None = None
) -> tuple[str, str | None]:
    """Return (training allocation, note) for a replay of ``alloc``.

    ``sglang:d4p1t1+fsdp:d4p1t1`` -> ``fsdp:d4p1t1``; names and colocation
    (``sglang[r]:d2|fsdp[a]:d2`` -> ``fsdp[a]:d2``) and every training backend
    are kept. A bare ``d4p1t1`` (rejected by AReaL 1.0.4) is read as training
    parallelism with the backend of ``actor.backend`` (fsdp if it has none);
    ``note`` then says so.
    """
    alloc = (alloc or "").strip()
    if not alloc:
        raise AllocationError(
            "allocation_mode is empty: a replay needs the training allocation to "
            "know how many trainer processes to start. Set it, e.g. "
            "++allocation_mode=fsdp:d4, or actor.backend=fsdp:d4."
        )
    read, note = read_bare_allocation(alloc, actor_backend or "")
    if note:
        _validate(read)
        return read, note
    _validate(alloc)
    components = allocation_parts(alloc)
    train = [c.strip() for c in components if _backend_of(c) in TRAIN_BACKENDS]
    if not train:
        raise AllocationError(
            f"allocation_mode={alloc!r} has no training part (only "
            f"{sorted({_backend_of(c) for c in components})}): a replay runs only "
            "the trainer. Give the training allocation, e.g. "
            "++allocation_mode=fsdp:d4, or ++allocation_mode=sglang:d4+fsdp:d4."
        )
    result = "+".join(train)
    _validate(result)
    return result, None


def allocation_from_backends(
    rollout_backend: str | None, actor_backend: str | None
) -> str:
    """The allocation AReaL 1.0's per-engine backends declare, for the SPMD
    launchers, which still parse ``allocation_mode``: ``rollout.backend`` and
    ``actor.backend`` joined (``sglang:d4p1t1+fsdp:d4p1t1``)."""
    actor = (actor_backend or "").strip()
    if not actor:
        raise AllocationError(
            "allocation_mode is empty and actor.backend is not set, so the launcher "
            "cannot tell how many trainer processes to start. Set actor.backend "
            "(e.g. actor.backend=fsdp:d4, with rollout.backend=sglang:d4 for the "
            "servers), or ++allocation_mode=sglang:d4+fsdp:d4."
        )
    parts = [p for p in ((rollout_backend or "").strip(), actor) if p]
    alloc = "+".join(parts)
    _validate(
        alloc,
        f"allocation_mode is empty; rollout.backend={rollout_backend!r} and "
        f"actor.backend={actor_backend!r} make {alloc!r}, which",
        "Set ++allocation_mode=... explicitly.",
    )
    return alloc
