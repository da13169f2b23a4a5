# SPDX-License-Identifier: Apache-2.0
"""Digests of each stage of a PPO step, taken as the engines produce them.

Installed on the engines where they train, the same way in dump and replay: in
the training process (SPMD mode) or in each RPC worker's engine
(single-controller mode, ``probed_engines``). Digested: the log-probs the actor
recomputes, the reference log-probs and critic values, the advantages and
returns, and per mini-batch: each micro-batch's loss, each parameter's gradient
before clipping (with its norm) and the weights after the mini-batch's optimizer
step. Once per run, as its first step starts, the actor's weights ("model": is it
the recorded one?). ``take()`` hands over one step's ``StageRecord``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from areal_debug import areal_compat
from areal_debug.logs import get_logger
from areal_debug.stages import mismatch
from areal_debug.stages.layers import LayerDigests
from areal_debug.stages.names import (
    LAYERS_STAGE,
    MODEL_STAGE,
    OPTIMIZER_SCOPE,
    OPTIMIZER_STEPS,
    mini_batch_name,
    tokens_name,
    trajectory_name,
)
from areal_debug.stages.record import StageRecord
from areal_debug.stages.recorded_ref_logp import RecordedRefLogp
from areal_debug.stages.stage_log import StageLog

logger = get_logger("DebugStages")
# What the reference's compute_logp calls per micro-batch: counted, so that a
# replay can show the reference model never ran (debug.replay_recorded_ref_logp).
_REF_FORWARD = "forward"
# What pure distillation's batch carries per trajectory (areal/trainer/ppo/actor.py
# after cbff54d, _prepare_mopd_batch): the aligned behaviour log-probs, and the
# teachers' log-prob sums (MOPDTeacherPhase.materialize) it trains towards.
MOPD_KEYS = ("mopd_behavior_logprobs", "mopd_teacher_logp_sum")


class StageProbes:
    def __init__(
        self,
        keep: frozenset[str] = frozenset(),
        recorded_ref: RecordedRefLogp | None = None,
    ):
        # The stages whose full tensors are kept besides their digests.
        self.keep = keep
        self.log = StageLog(keep)
        # Replay: the recorded reference log-probs stand in for its forward pass.
        self.recorded_ref = recorded_ref
        # The reference model's forward passes this step (None: no reference).
        self.ref_forwards: int | None = None
        # Set by the first digest that fails: probing stops, training goes on.
        self.failed: str | None = None
        # The measurements beside the digests (the mismatch, the optimizer's
        # step count, the layer digests) that failed, with why: each alone stops.
        self.stopped_aside: dict[str, str] = {}
        # Digest the actor's layers in this step's log-prob forward pass
        # (debug.layer_digests; set before each step by the mode).
        self.layers = False

    def _digest(self, what: str, work: Callable[[], None]) -> None:
        """Run one digest step; an error in it never reaches the training step."""
        if self.failed is not None:
            return
        try:
            work()
        except Exception as e:  # noqa: BLE001 - the recorder must not kill training
            self.failed = f"{what}: {e!r}"
            logger.error(
                f"Stage digests stopped ({self.failed}); training goes on and the "
                "replay compares the committed statistics only from here. Turn "
                "them off with debug.stage_digests=false."
            )

    def install(self, trainer, patches: areal_compat.MethodPatches) -> None:
        """On every engine of a trainer that trains in this process (SPMD)."""
        for role, engine in areal_compat.stage_engines(trainer).items():
            self.install_engine(role, engine, patches)

    def install_engine(
        self, role: str, engine, patches: areal_compat.MethodPatches
    ) -> None:
        """On one engine: the actor's stages, or the reference's log-probs, or the
        critic's values. The methods wrapped are ``areal_compat.STAGE_METHODS``'
        for ``role``, each by the probe named ``_probe_<method>``."""
        if role == "ref":
            self.ref_forwards = 0
            patches.wrap(engine, _REF_FORWARD, self._counted_forward)
        for method in stage_methods(role, engine):
            patches.wrap(engine, method, self._probe(method)(role, engine))

    def _probe(self, method: str) -> Callable[[str, Any], Callable]:
        probe = _PROBES.get(method)
        if probe is None:
            raise NotImplementedError(
                f"areal_compat.STAGE_METHODS names {method!r}, which no stage probe "
                "digests: add its probe to stages.probes._PROBES."
            )
        return functools.partial(probe, self)

    def take(self) -> StageRecord:
        """This step's record: digests as plain values, the kept tensors, the
        seconds spent digesting and the reference's forward passes; starts the
        next step."""
        log, self.log = self.log, StageLog(self.keep)
        forwards = self.ref_forwards
        if forwards is not None:
            self.ref_forwards = 0
        if self.failed is not None:
            return StageRecord(None, ref_forwards=forwards)
        out: list = []
        self._digest("the step's transfer", lambda: out.append(log.to_host()))
        if not out:
            return StageRecord(None, ref_forwards=forwards)
        return StageRecord(out[0], log.tensors, log.seconds, forwards)

    def _counted_forward(self, forward: Callable) -> Callable:
        def counted(*args, **kwargs):
            self.ref_forwards += 1
            return forward(*args, **kwargs)

        return counted

    # -- the probes, one per STAGE_METHODS method: (role, engine) -> wrapper ---------
    def _probe_compute_logp(self, role: str, engine) -> Callable:
        if role != "ref":
            return self._measured(engine, self._per_trajectory("logp"))
        digested = self._per_trajectory("ref_logp")
        if self.recorded_ref is None:
            return digested
        # The recorded log-probs stand in for the forward pass, and are digested.
        return lambda compute: digested(self.recorded_ref.stand_in(compute))

    def _probe_compute_values(self, role: str, engine) -> Callable:
        return self._per_trajectory("values")

    def _probe_compute_advantages(self, role: str, engine) -> Callable:
        return self._advantages

    def _probe_prepare_mopd_batch(self, role: str, engine) -> Callable:
        return self._mopd

    def _probe_train_batch(self, role: str, engine) -> Callable:
        return self._train_batch

    def _probe_optimizer_step(self, role: str, engine) -> Callable:
        return lambda step: self._optimizer_step(engine, step)

    # -- the wrappers --------------------------------------------------------------
    def _per_trajectory(self, stage: str) -> Callable[[Callable], Callable]:
        def make(compute: Callable) -> Callable:
            def digested(*args, **kwargs):
                out = compute(*args, **kwargs)
                items = [
                    (trajectory_name(i), t, 0)
                    for i, t in enumerate(_as_list(out))
                    if isinstance(t, torch.Tensor)
                ]
                self._digest(stage, lambda: self.log.add_many(stage, items))
                if stage in self.keep:
                    data = args[0] if args else kwargs.get("data")
                    self._digest(stage, lambda: _keep_tokens(self.log, stage, data))
                return out

            return digested

        return make

    def _measured(self, engine, digested: Callable[[Callable], Callable]) -> Callable:
        """The actor's recomputed log-probs, also measured against the engine's
        (stages/mismatch.py): the training–inference mismatch of the step; and
        the optimizer's step count then, before the step's updates."""

        def make(compute: Callable) -> Callable:
            inner = digested(compute)

            def measured(*args, **kwargs):
                self._count_optimizer_steps(engine)
                data = args[0] if args else kwargs.get("data")
                with self._layers_digested(engine, data):
                    out = inner(*args, **kwargs)
                self._measure(data, _as_list(out))
                return out

            return measured

        return make

    @contextlib.contextmanager
    def _layers_digested(self, engine, data: Any) -> Iterator[None]:
        """The actor's forward pass with its layers digested (stages/layers.py),
        when this step asks for them."""
        model = areal_compat.engine_model(engine)
        what = "layer digests"
        if (
            not self.layers
            or model is None
            or self.failed
            or what in self.stopped_aside
        ):
            yield
            return
        layers = LayerDigests(self.log, data)
        with layers.hooked(model):
            yield
        if layers.error is not None:
            # A partial stage would compare as differing: none this step.
            self.log.entries.pop(LAYERS_STAGE, None)
            self.log.tensors = {
                k: t for k, t in self.log.tensors.items() if k[0] != LAYERS_STAGE
            }
            self._stop_aside(what, "The layers are not digested", layers.error)

    def _measure(self, data: Any, logps: list) -> None:
        """The mismatch of one compute_logp call."""
        self._aside(
            "mismatch",
            "The training-inference mismatch is not measured",
            lambda: mismatch.record(data, logps),
        )

    def _count_optimizer_steps(self, engine) -> None:
        """The step's ``OPTIMIZER_STEPS_STAT``."""

        def count() -> None:
            steps = areal_compat.optimizer_steps(engine)
            if steps is not None:
                areal_compat.record_scalars(OPTIMIZER_SCOPE, **{OPTIMIZER_STEPS: steps})

        self._aside(
            "optimizer steps", "The optimizer's step count is not recorded", count
        )

    def _aside(self, what: str, stopped: str, work: Callable[[], None]) -> None:
        """A measurement beside the digests: an error in it stops only it (said
        once, as ``stopped``), never the digests or the training step."""
        if what in self.stopped_aside:
            return
        try:
            work()
        except Exception as e:  # noqa: BLE001 - the recorder must not kill training
            self._stop_aside(what, stopped, repr(e))

    def _stop_aside(self, what: str, stopped: str, why: str) -> None:
        """Stop the measurement ``what`` for the rest of the run, said once."""
        self.stopped_aside[what] = why
        logger.error(
            f"{stopped} from here on ({why}); training and the stage digests go on."
        )

    def _advantages(self, compute: Callable) -> Callable:
        return self._keyed("advantages", ("advantages", "returns"), compute)

    def _mopd(self, prepare: Callable) -> Callable:
        """Pure distillation's batch (AReaL after cbff54d, #1592): the rollout's
        behaviour log-probs it aligns, and the teachers' log-prob sums it trains
        towards, per trajectory."""
        return self._keyed("mopd", MOPD_KEYS, prepare)

    def _keyed(self, stage: str, keys: tuple[str, ...], compute: Callable) -> Callable:
        """``compute`` returning trajectory dicts, with ``keys`` of each digested."""

        def digested(*args, **kwargs):
            out = compute(*args, **kwargs)
            items = []
            for i, traj in enumerate(_as_list(out)):
                for key in keys:
                    t = traj.get(key) if isinstance(traj, dict) else None
                    if isinstance(t, torch.Tensor):
                        items.append((f"{trajectory_name(i)} {key}", t, 0))
            self._digest(stage, lambda: self.log.add_many(stage, items))
            return out

        return digested

    def _train_batch(self, train_batch: Callable) -> Callable:
        def digested(*args, **kwargs):
            mb = self.log.next_index("mini-batch")
            if "loss_fn" in kwargs:
                kwargs["loss_fn"] = self._loss(mb, kwargs["loss_fn"])
            elif len(args) >= 2:
                args = (args[0], self._loss(mb, args[1]), *args[2:])
            return train_batch(*args, **kwargs)

        return digested

    def _loss(self, mb: int, loss_fn: Callable) -> Callable:
        def digested(*args, **kwargs):
            loss = loss_fn(*args, **kwargs)
            micro = self.log.next_index(f"micro-batch of {mb}")
            name = mini_batch_name(mb, f"micro-batch {micro}")
            self._digest("loss", lambda: self.log.add("loss", name, loss, value=True))
            return loss

        return digested

    def _optimizer_step(self, actor, step: Callable) -> Callable:
        """Once per mini-batch (train_batch's last call): the gradients before it
        clips them, the weights after its step, both named by the mini-batch."""

        def digested(*args, **kwargs):
            mb = self.log.counters.get("mini-batch", 1) - 1
            self._digest(
                "grads", lambda: self._add_shards("grads", _grads(actor, mb), True)
            )
            out = step(*args, **kwargs)
            self._digest(
                "weights", lambda: self._add_shards("weights", _weights(actor, mb))
            )
            return out

        return digested

    def digest_model(self, actor) -> dict[str, list] | None:
        """The actor's weights as a run's first step starts (any checkpoint
        restored): into this step's record as the global stage "model", and
        returned as this rank's shard sums (``{parameter: [s1, s2, None]}``,
        ``merge_global`` adds the ranks') for the replay's check before the
        step. None when digesting failed (it said why)."""
        named = [
            (name, param) for name, param in areal_compat.engine_named_parameters(actor)
        ]
        out: list = []

        def work() -> None:
            # One read of the weights: digested alone (for the check now), then
            # the same entries taken into the step's record.
            alone = StageLog()
            alone.add_many(MODEL_STAGE, _local_shards(named))
            out.append(alone.to_host().get(MODEL_STAGE, {}))
            self.log.adopt(alone)

        self._digest(MODEL_STAGE, work)
        return out[0] if out else None

    def _add_shards(self, stage: str, named: list, norm: bool = False) -> None:
        self.log.add_many(stage, _local_shards(named), norm=norm)


def _keep_tokens(log: StageLog, stage: str, data: Any) -> None:
    """Each trajectory's tokens beside its kept values (-1 outside its attention
    mask): the page pairs the values with the recorded rows they belong to by
    these, never by position (AReaL reorders rows even on one rank)."""
    for i, traj in enumerate(data if isinstance(data, list) else []):
        ids = traj.get("input_ids") if isinstance(traj, dict) else None
        if not isinstance(ids, torch.Tensor):
            continue
        mask = traj.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.shape == ids.shape:
            ids = torch.where(mask.bool(), ids, torch.full_like(ids, -1))
        # int32 holds every vocabulary, and half the bytes of AReaL 1.0's int64.
        log.keep_only(stage, tokens_name(i), ids.to(torch.int32))


def _grads(actor, mb: int) -> list:
    """Mini-batch ``mb``'s gradients, named for the step's record."""
    return [
        (mini_batch_name(mb, name), param.grad)
        for name, param in areal_compat.engine_named_parameters(actor)
        if param.grad is not None
    ]


def _weights(actor, mb: int) -> list:
    """The weights after mini-batch ``mb``'s optimizer step, named."""
    return [
        (mini_batch_name(mb, name), param)
        for name, param in areal_compat.engine_named_parameters(actor)
    ]


def _local_shards(named: list) -> list[tuple[str, torch.Tensor, int]]:
    """``(name, this rank's part, its flat offset)`` of each tensor this rank
    counts (``local_shard``)."""
    items = []
    for name, t in named:
        local, offset = local_shard(t)
        if local is not None:
            items.append((name, local, offset))
    return items


# The probe of each STAGE_METHODS method, by name: (probes, role, engine) -> wrapper.
_PROBES: dict[str, Callable[..., Callable]] = {
    "compute_logp": StageProbes._probe_compute_logp,
    "compute_values": StageProbes._probe_compute_values,
    "compute_advantages": StageProbes._probe_compute_advantages,
    "prepare_mopd_batch": StageProbes._probe_prepare_mopd_batch,
    "train_batch": StageProbes._probe_train_batch,
    "optimizer_step": StageProbes._probe_optimizer_step,
}


def stage_methods(role: str, engine: Any = None) -> tuple[str, ...]:
    """The methods an engine of ``role`` (actor, ref, critic) is probed on: its
    STAGE_METHODS, for the actor its engine's too (the actor trains itself), and
    the OPTIONAL_STAGE_METHODS ``engine`` has."""
    methods = areal_compat.STAGE_METHODS[role]
    if role == "actor":
        methods += areal_compat.STAGE_METHODS["actor_engine"]
    optional = areal_compat.OPTIONAL_STAGE_METHODS.get(role, ())
    methods += tuple(m for m in optional if hasattr(engine, m))
    return methods


def _as_list(out: Any) -> list:
    if out is None:
        return []
    if isinstance(out, torch.Tensor):
        return [out]
    return list(out) if isinstance(out, (list, tuple)) else []


def local_shard(t: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    """This rank's part of ``t`` and its flat offset in the whole tensor, such that
    the ranks' digests sum to the whole tensor's. ``None`` when another rank holds
    the same values (a replica), so that nothing is counted twice."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without DTensor
        return t, 0
    if not isinstance(t, DTensor):
        return t, 0
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    mesh, placements = t.device_mesh, t.placements
    coordinate = mesh.get_coordinate() or []
    for dim, placement in enumerate(placements):
        if not isinstance(placement, Shard) and coordinate[dim] != 0:
            return None, 0  # a replica: the first one counts
    local = t.to_local()
    shape, offset = compute_local_shape_and_global_offset(t.shape, mesh, placements)
    rows_whole = all(shape[d] == t.shape[d] for d in range(1, t.dim()))
    if rows_whole:
        # Sharded along rows only: the shard is one contiguous run of the whole.
        flat_offset = int(offset[0]) * math.prod(t.shape[1:]) if t.dim() else 0
        return local, flat_offset
    # Sharded along an inner dimension: digest the gathered tensor once.
    full = t.full_tensor()
    first = all(c == 0 for c in coordinate)
    return (full, 0) if first else (None, 0)
