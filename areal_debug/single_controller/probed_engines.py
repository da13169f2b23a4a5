# SPDX-License-Identifier: Apache-2.0
"""AReaL's FSDP engines with stage probes, for the RPC workers of single-controller mode.

There the engines train in the workers, not in the trainer's process, so the
controller is told to build these classes instead (``areal_compat.
use_worker_engine_class``); the workers import them by name. The controller then
calls extra engine methods through AReaL's own RPC: ``configure_stage_probes``
once (role and kept stages), ``hand_over_ref_logp`` before a replayed step that
uses the recorded reference log-probs, and ``take_stage_digests`` at each step's
end; for ``debug.blame_steps``, ``configure_blame`` once, ``blame_step`` when a
step starts and ``take_blame`` at a blamed step's end (the passes run in the
workers, where the actor trains). The ``StageRecord``s are gathered over the
engine's ranks in the workers, as the SPMD trainer gathers them over its
processes, so the controller gets every rank's from one call; they cross the RPC
as plain dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from areal.engine import FSDPPPOActor, FSDPPPOCritic

from areal_debug import areal_compat
from areal_debug.areal_compat import MethodPatches
from areal_debug.stages.blame import SampleBlame
from areal_debug.stages.probes import StageProbes
from areal_debug.stages.record import StageRecord, decode_tensors, encode_tensors
from areal_debug.stages.recorded_ref_logp import RecordedRefLogp


class StageProbedEngine:
    """Mixed into an AReaL engine class: the methods the controller calls."""

    _stage_probes: StageProbes | None = None
    _blame: SampleBlame | None = None

    def configure_stage_probes(
        self, role: str, keep: list[str], recorded_ref: bool = False
    ) -> None:
        """Digest this engine's stages from now on (``role``: actor, ref or critic);
        ``recorded_ref``: the reference's log-probs come from the recording."""
        stand_in = None
        if recorded_ref and role == "ref":
            stand_in = RecordedRefLogp()
        self._stage_probes = StageProbes(frozenset(keep), stand_in)
        self._stage_patches = MethodPatches()
        self._stage_probes.install_engine(role, self, self._stage_patches)

    def hand_over_ref_logp(self, step: int, text: str) -> None:
        """The step's recorded reference log-probs (``encode_tensors``, all ranks')."""
        self._stage_probes.recorded_ref.hand_over(step, decode_tensors(text))

    def digest_layers(self, on: bool) -> None:
        """Digest the layers in the log-prob forward passes from now on, or not."""
        if self._stage_probes is not None:
            self._stage_probes.layers = bool(on)

    def digest_model(self) -> list[dict[str, list] | None]:
        """Every rank's digests of this (actor) engine's weights as the run's
        first step starts (``StageProbes.digest_model``), gathered over its ranks."""
        local = None
        if self._stage_probes is not None:
            local = self._stage_probes.digest_model(self)
        return self._gathered(local)

    def take_stage_digests(self) -> list[dict[str, Any]]:
        """Every rank's ``StageRecord`` of the step, gathered over this engine's
        ranks, as ``StageRecord.to_dict`` plain values: AReaL's RPC carries those."""
        if self._stage_probes is None:
            local = StageRecord(None)  # never configured: no digests
        else:
            local = self._stage_probes.take()
        return self._gathered(local.to_dict())

    def configure_blame(self) -> None:
        """Each sample's part in the steps ``blame_step`` turns on (after the
        stage probes: the passes run outside their digests)."""
        self._blame = SampleBlame(self)
        self._blame_patches = MethodPatches()
        self._blame.install(self._blame_patches)

    def blame_step(self, on: bool) -> None:
        """Whether the step about to train is blamed."""
        if self._blame is not None:
            self._blame.on = bool(on)

    def take_blame(self) -> list[dict[str, Any] | None]:
        """Every rank's parts of the step (``SampleBlame.take``: plain values),
        gathered over this engine's ranks."""
        local = self._blame.take() if self._blame is not None else None
        return self._gathered(local)

    def _gathered(self, wire: Any) -> list:
        """``wire`` of every rank of this engine, in rank order."""
        if not dist.is_initialized():
            return [wire]
        gathered: list = [None] * dist.get_world_size(self.cpu_group)
        dist.all_gather_object(gathered, wire, group=self.cpu_group)
        return gathered


class ProbedFSDPPPOActor(StageProbedEngine, FSDPPPOActor):
    """``FSDPPPOActor`` (actor and reference) with stage probes."""


class ProbedFSDPPPOCritic(StageProbedEngine, FSDPPPOCritic):
    """``FSDPPPOCritic`` with stage probes."""


# AReaL's engine class -> the probed one the workers build instead.
PROBED = {FSDPPPOActor: ProbedFSDPPPOActor, FSDPPPOCritic: ProbedFSDPPPOCritic}


def _call_engines(controller, method: Callable, *args) -> Any:
    """Call a ``StageProbedEngine`` method on every worker's engine; the RPC names
    it as Python does, so the name is never written twice."""
    return areal_compat.call_engines(controller, method.__name__, *args)


class WorkerBlame:
    """The controller's handle on the blame passes in the actor's workers: ``on``
    and ``take`` as ``SampleBlame``'s, each an RPC (``on`` only when it changes)."""

    def __init__(self, controller):
        self._controller = controller
        self._on = False

    @property
    def on(self) -> bool:
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        if bool(value) != self._on:
            self._on = bool(value)
            _call_engines(self._controller, StageProbedEngine.blame_step, self._on)

    def take(self) -> list:
        """Every worker rank's parts of the step, in rank order."""
        return _call_engines(self._controller, StageProbedEngine.take_blame)


class WorkerStageProbes:
    """The controller's handle on its workers' probed engines (single-controller)."""

    def __init__(self):
        self.controllers: list[tuple[str, Any]] = []
        # What the actor's workers were last told (an RPC only when it changes).
        self._layers = False

    def probe(self, role: str, controller) -> str | None:
        """Have ``controller``'s workers build the probed form of its engine class
        (before they build it); why not, if its class has none."""
        engine_class = areal_compat.worker_engine_class(controller)
        probed = PROBED.get(engine_class)
        if probed is None:
            return f"{role} trains with {engine_class.__name__}, not an FSDP engine"
        areal_compat.use_worker_engine_class(controller, probed)
        self.controllers.append((role, controller))
        return None

    def start(self, keep: frozenset[str], recorded_ref: bool) -> None:
        for role, controller in self.controllers:
            _call_engines(
                controller,
                StageProbedEngine.configure_stage_probes,
                role,
                sorted(keep),
                recorded_ref,
            )

    def _actor(self):
        """The probed actor's controller, None where the actor is not probed."""
        return next((c for role, c in self.controllers if role == "actor"), None)

    def start_blame(self) -> WorkerBlame | None:
        """The blame passes in the actor's workers; None without a probed actor."""
        actor = self._actor()
        if actor is None:
            return None
        _call_engines(actor, StageProbedEngine.configure_blame)
        return WorkerBlame(actor)

    def hand_over_ref_logp(self, step: int, tensors: dict) -> None:
        for role, controller in self.controllers:
            if role == "ref":
                _call_engines(
                    controller,
                    StageProbedEngine.hand_over_ref_logp,
                    step,
                    encode_tensors(tensors),
                )

    def digest_layers(self, on: bool) -> None:
        if on == self._layers:
            return
        self._layers = on
        if (actor := self._actor()) is not None:
            _call_engines(actor, StageProbedEngine.digest_layers, on)

    def digest_model(self) -> list | None:
        """The actor's workers' digests of its weights (every rank's), None where
        there is no probed actor or a rank's failed."""
        actor = self._actor()
        if actor is None:
            return None
        gathered = _call_engines(actor, StageProbedEngine.digest_model)
        return None if None in gathered else gathered

    def take(self) -> list[StageRecord]:
        """Every worker rank's step: the union of its engines' stages."""
        per_rank: list[StageRecord] = []
        for _, controller in self.controllers:
            gathered = _call_engines(controller, StageProbedEngine.take_stage_digests)
            for rank, wire in enumerate(gathered):
                if rank == len(per_rank):
                    per_rank.append(StageRecord.empty())
                per_rank[rank] = per_rank[rank].union(StageRecord.from_dict(wire))
        return per_rank
