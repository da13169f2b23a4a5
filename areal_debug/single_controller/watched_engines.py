# SPDX-License-Identifier: Apache-2.0
"""AReaL's remote inference engines noting the requests their workflows fail on,
for the rollout workers of single-controller mode.

A workflow whose ``agenerate`` raises is logged and its rollout rejected, in the
worker that ran it; the step trains on the rollouts that did not fail. AReaL main
refuses a non-finite log-prob that way (``HttpGenerationResult``, PR #1554), where
1.0.4 and 2.0.0 put a NaN in the batch, which the anomaly detector pins. The
controller has the workers build these classes instead of AReaL's
(``areal_compat.watch_rollout_workers``) and takes their notes at each step's
end through AReaL's own RPC (``take_rollout_failures``), so such a step is pinned
as in SPMD mode, where the engine lives in the trainer's process.
"""

from __future__ import annotations

import threading
from typing import Any

from areal_debug import areal_compat
from areal_debug.areal_compat import MethodPatches


class FailureNotes:
    """Mixed into an AReaL remote engine class: notes each exception of its
    workflows' ``agenerate`` (raised on, as before) until the controller takes them."""

    _failure_lock: threading.Lock | None = None
    _failure_notes: list[str]

    def initialize(self, *args, **kwargs):
        result = super().initialize(*args, **kwargs)
        # The workflow executor, and the engine its workflows call, exist now.
        self._failure_lock = threading.Lock()
        self._failure_notes = []
        target = areal_compat.workflow_engine(self)
        if target is not None:
            self._failure_patches = MethodPatches()
            areal_compat.note_agenerate_failures(
                target, self._failure_patches, self._note_failure
            )
        return result

    def _note_failure(self, text: str) -> None:
        with self._failure_lock:
            self._failure_notes.append(text)

    def take_rollout_failures(self) -> list[str]:
        """The failures noted since the last call (``"ExceptionType: message"``)."""
        if self._failure_lock is None:
            return []  # not initialised: nothing ran
        with self._failure_lock:
            taken, self._failure_notes = self._failure_notes, []
        return taken


_SGLANG = areal_compat.rollout_controller_class("sglang")
_VLLM = areal_compat.rollout_controller_class("vllm")


class WatchedRemoteSGLangEngine(FailureNotes, _SGLANG):
    """AReaL's ``RemoteSGLangEngine``, noting failed requests."""


class WatchedRemotevLLMEngine(FailureNotes, _VLLM):
    """AReaL's ``RemotevLLMEngine``, noting failed requests."""


# AReaL's engine class -> the watched one the rollout workers build instead.
WATCHED: dict[type, type] = {
    _SGLANG: WatchedRemoteSGLangEngine,
    _VLLM: WatchedRemotevLLMEngine,
}


def take_rollout_failures(controller: Any) -> list[str]:
    """Every rollout worker's noted failures, each prefixed with its worker's rank;
    none where the workers built AReaL's own class (they were not watched)."""
    if areal_compat.rollout_worker_engine_class(controller) not in WATCHED.values():
        return []
    per_worker = areal_compat.call_rollout_workers(
        controller, FailureNotes.take_rollout_failures.__name__
    )
    return [
        f"rollout worker {rank}: {note}"
        for rank, notes in enumerate(per_worker)
        for note in notes or []
    ]
