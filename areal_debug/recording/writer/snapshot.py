# SPDX-License-Identifier: Apache-2.0
"""What the recorder keeps of a batch: a copy later changes cannot reach.

The trainer adds keys (prox_logp, ref_logp, values...) to the trajectory dicts
it is given, so containers are always copied, on the training thread (cheap).
Tensors need a copy only when the trainer may use the very host tensors the
engine returned (CPU training). That copy runs on a copier thread (PyTorch
releases the GIL while it copies) and is proved untouched by the tensors'
version counters, which every in-place operation bumps: a batch changed in
place before it was copied is never recorded as if it were the original.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from areal_debug.recording.packed_payload import pack
from areal_debug.recording.writer.payload_rules import check_storable


class ChangedInPlace(RuntimeError):
    """The trainer changed a batch tensor in place before its background copy was safe."""


def _path(parts: tuple) -> str:
    return "trajectory" + "".join(f"[{p!r}]" for p in parts)


def snapshot_value(
    value: Any, clone: bool, parts: tuple = (), watch: list | None = None
) -> Any:
    """Copy containers (and tensors when ``clone``) so later changes cannot reach
    the copy. ``watch`` collects (where, tensor, version) of the host tensors
    kept uncopied, in the same pass."""
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            value = value.detach()
        if value.device.type != "cpu":
            return value.to("cpu")  # already a copy
        if clone:
            return value.clone()
        if watch is not None:
            watch.append((parts, value, _version(value)))
        return value
    if isinstance(value, dict):
        return {
            k: snapshot_value(v, clone, (*parts, k), watch) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        items = [
            snapshot_value(v, clone, (*parts, i), watch) for i, v in enumerate(value)
        ]
        return items if isinstance(value, list) else tuple(items)
    check_storable(value, _path(parts))
    return value


def snapshot_batch(
    batch: list[dict[str, Any]], clone_tensors: bool = True, watch: list | None = None
) -> list[dict[str, Any]]:
    """Copy a rollout batch (list of trajectory dicts) for the background writer.

    ``clone_tensors=False`` is for when the trainer never sees these host
    tensors: AReaL copies the batch to the accelerator first
    (``tensor_container_to``), so only the containers need copying.
    """
    if not isinstance(batch, list):
        raise TypeError(
            f"The rollout engine returned a {type(batch).__name__}; areal-debug "
            "records the list of trajectory dicts that prepare_batch returns."
        )
    return [
        snapshot_value(traj, clone_tensors, (i,), watch) for i, traj in enumerate(batch)
    ]


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except RuntimeError:
        # An inference-mode tensor has no version counter; it also cannot be
        # changed in place outside inference mode, where training runs.
        return None


class PendingCopy:
    """A batch whose tensors are being copied; the versions they had.

    ``copied`` is the Future of a copier thread's copy, in packed form
    (packed_payload); None when the writer process reads ``shared`` itself
    (``writer.process``), which is the copy. ``confirm()`` checks the versions
    once more, later (after the writer has written the step): an in-place
    change that was still running while the copy was made bumps the counter
    only when it ends, so a change before that point cannot be told apart from
    one during the copy, and the step is refused either way.
    """

    def __init__(self, batch: list[dict[str, Any]], pool: ThreadPoolExecutor | None):
        # One pass on the training thread: containers copied, versions noted.
        self._watched: list = []
        self.shared = snapshot_batch(batch, clone_tensors=False, watch=self._watched)
        self.copied: Future | None = (
            pool.submit(self._copy, self.shared) if pool is not None else None
        )

    def _copy(self, shared: list[dict[str, Any]]) -> dict[str, Any]:
        # Packing is the copy (one call per dtype); the writer describes what it
        # stores from it.
        packed = pack(shared)
        self.confirm()
        return packed

    def confirm(self) -> None:
        changed = [
            _path(parts)
            for parts, t, v in self._watched
            if v is not None and _version(t) != v
        ]
        if changed:
            shown = ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
            raise ChangedInPlace(
                f"{len(changed)} tensor(s) of the batch were changed in place by the "
                f"trainer before the recorder's background copy was done ({shown})"
            )


class Snapshotter:
    """Takes the recorder's copy of each batch, blocking the training thread as
    little as the trainer allows.

    ``clone_tensors=False``: containers only (the trainer uses device copies).
    ``clone_tensors=True``: containers now, tensors on a copier thread, checked
    by version counters; after a batch was changed in place, the copies are
    made on the training thread for the rest of the run.
    """

    def __init__(self, clone_tensors: bool):
        self.clone_tensors = clone_tensors
        self.background = clone_tensors
        self._pool: ThreadPoolExecutor | None = None

    def take(
        self, batch: list[dict[str, Any]], copier: bool = True
    ) -> list[dict[str, Any]] | PendingCopy:
        """The recorder's copy of ``batch``; with ``copier=False`` the tensors of
        a pending copy are left for the writer process to read."""
        if not self.background:
            return snapshot_batch(batch, self.clone_tensors)
        if not copier:
            return PendingCopy(batch, None)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="areal-debug-copy")
        return PendingCopy(batch, self._pool)

    def copy_on_training_thread(self) -> None:
        """From now on, copy on the training thread (the trainer changes batches)."""
        self.background = False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
