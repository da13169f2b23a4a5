# SPDX-License-Identifier: Apache-2.0
"""AReaL's FSDP engines with stage probes, for the RPC workers of single-controller mode.

There the engines train in the workers, not in the trainer's process, so the
controller is told to build these classes instead (``areal_compat.
use_worker_engine_class``); the workers import them by name. The controller then
calls two extra engine methods through AReaL's own RPC: ``configure_stage_probes``
once (role and kept stages) and ``take_stage_digests`` at each step's end. The
digests are gathered over the engine's ranks in the workers, as the SPMD trainer
gathers them over its processes, so the controller gets every rank's from one call.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import torch
import torch.distributed as dist
from areal.engine import FSDPPPOActor, FSDPPPOCritic

from areal_debug import areal_compat
from areal_debug.areal_compat import MethodPatches
from areal_debug.stages.probes import StageProbes
from areal_debug.stages.recorded_ref_logp import RecordedRefLogp


class StageProbedEngine:
    """Mixed into an AReaL engine class: the two methods the controller calls."""

    _stage_probes: StageProbes | None = None

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

    def take_stage_digests(self) -> list[tuple[Any, str, float, int | None]]:
        """Every rank's ``(digests, kept tensors, seconds, reference forwards)`` of
        the step, gathered over this engine's ranks; the kept tensors travel as
        ``encode_tensors`` text, so AReaL's RPC does not keep them on the worker
        as RTensors."""
        if self._stage_probes is None:
            local: tuple = (None, {}, 0.0, None)
        else:
            local = self._stage_probes.take()
        local = (local[0], encode_tensors(local[1]), *local[2:])
        if not dist.is_initialized():
            return [local]
        gathered: list = [None] * dist.get_world_size(self.cpu_group)
        dist.all_gather_object(gathered, local, group=self.cpu_group)
        return gathered


class ProbedFSDPPPOActor(StageProbedEngine, FSDPPPOActor):
    """``FSDPPPOActor`` (actor and reference) with stage probes."""


class ProbedFSDPPPOCritic(StageProbedEngine, FSDPPPOCritic):
    """``FSDPPPOCritic`` with stage probes."""


# AReaL's engine class -> the probed one the workers build instead.
PROBED = {FSDPPPOActor: ProbedFSDPPPOActor, FSDPPPOCritic: ProbedFSDPPPOCritic}


def encode_tensors(tensors: dict[str, torch.Tensor]) -> str:
    if not tensors:
        return ""
    buf = io.BytesIO()
    torch.save(tensors, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_tensors(text: str) -> dict[str, torch.Tensor]:
    """``encode_tensors`` undone, with ``weights_only`` loading."""
    if not text:
        return {}
    data = base64.b64decode(text.encode("ascii"))
    return torch.load(io.BytesIO(data), weights_only=True)


class WorkerStageProbes:
    """The controller's handle on its workers' probed engines (single-controller)."""

    def __init__(self):
        self.controllers: list[tuple[str, Any]] = []

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
            areal_compat.call_engines(
                controller, "configure_stage_probes", role, sorted(keep), recorded_ref
            )

    def hand_over_ref_logp(self, step: int, tensors: dict) -> None:
        for role, controller in self.controllers:
            if role == "ref":
                areal_compat.call_engines(
                    controller, "hand_over_ref_logp", step, encode_tensors(tensors)
                )

    def take(self) -> list[tuple[Any, dict, float, int | None]]:
        """Every worker rank's step: the union of its engines' stages."""
        per_rank: list[list] = []
        for _, controller in self.controllers:
            gathered = areal_compat.call_engines(controller, "take_stage_digests")
            for rank, (digests, text, seconds, forwards) in enumerate(gathered):
                if rank == len(per_rank):
                    per_rank.append([{}, {}, 0.0, None])
                entry = per_rank[rank]
                if digests is None or entry[0] is None:
                    entry[0] = None  # that engine's digests failed (it said why)
                else:
                    entry[0].update(digests)
                entry[1].update(decode_tensors(text))
                entry[2] += seconds
                if forwards is not None:
                    entry[3] = (entry[3] or 0) + forwards
        return [tuple(e) for e in per_rank]
