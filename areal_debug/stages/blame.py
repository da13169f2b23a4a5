# SPDX-License-Identifier: Apache-2.0
"""Each sample's part in a step's update (``debug.blame_steps``), in AReaL's own
arithmetic.

Before each of a blamed step's mini-batches trains, its ``train_batch`` runs again
without its optimizer step: once on the whole mini-batch (its gradient G before
clipping, as the real call computes it) and once per sample with the loss mask
of every other sample cleared (that sample's gradient g_s). Each pass is AReaL's
own: the same micro-batches and packing (a sample still attends to the ones
packed before it where the attention does), the same loss function, the same
dropout masks (the RNG state is put back before each pass). A loss that is a
weighted mean over the micro-batch (AReaL's token mean, weighted by its loss
tokens) is linear in the samples' terms, so with the weights of the whole
mini-batch kept (``_FULL_MASK``) the sample passes' losses and gradients add up
to the mini-batch's. Then the parameters, the optimizer, the RNG and AReaL's
statistics are as before, and the real ``train_batch`` trains the step as if
nothing ran: the step's result stays bit for bit.

Per sample: its signed loss contribution, its gradient's norm, the projection
<g_s, G> (a sample can pull against the update), its tokens clipped,
dual-clipped and behaviour-weight capped (read from AReaL's own loss statistics
of its pass), its advantage, its engine and trainer log-probs' finiteness and
gap. ``shares`` turns the projections into grad shares over the step (summing
to 1) and the losses into loss shares.

Data-parallel ranks: every rank joins every pass (FSDP's collectives), and a pass
carries one rank's sample, the others' masks cleared, so that the reduced
gradient is that sample's alone.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from areal_debug import areal_compat
from areal_debug.logs import get_logger
from areal_debug.stages.layers import sample_tokens
from areal_debug.stages.probes import local_shard
from areal_debug.stages.sample_parts import sample_key

logger = get_logger("DebugBlame")

# The whole mini-batch's loss mask, carried beside each pass's cleared one: the
# micro-batches' loss weights stay the whole mini-batch's.
_FULL_MASK = "areal_debug_full_loss_mask"


class SampleBlame:
    """The blame passes on the actor's engine: ``install`` once, ``on`` set per
    step (``debug.blame_steps``), ``take`` the step's parts."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.on = False
        # Set by the first error: blame stops, training goes on.
        self.failed: str | None = None
        self.rows: list[dict[str, Any]] = []
        self.mini_batches: list[dict[str, Any]] = []
        self.seconds = 0.0

    def install(self, patches: areal_compat.MethodPatches) -> None:
        """Around the engine's ``train_batch`` as the step calls it (outside the
        stage probes): the passes call the class's own, unpatched."""
        own = functools.partial(type(self.engine).train_batch, self.engine)
        patches.wrap(self.engine, "train_batch", lambda call: self._blamed(own, call))

    def take(self) -> dict[str, Any]:
        """The step's parts (``samples``, ``mini_batches``); starts the next."""
        out = {
            "samples": self.rows,
            "mini_batches": self.mini_batches,
            "seconds": self.seconds,
            "failed": self.failed,
        }
        self.rows, self.mini_batches, self.seconds = [], [], 0.0
        return out

    def _blamed(self, own: Callable, call: Callable) -> Callable:
        def blamed(*args, **kwargs):
            if self.on and self.failed is None:
                start = time.perf_counter()
                try:
                    self.before_train_batch(
                        own, len(self.mini_batches), *_parts(args, kwargs)
                    )
                except Exception as e:  # noqa: BLE001 - blame must not kill training
                    self.failed = f"{type(e).__name__}: {e}"
                    logger.error(
                        f"Blame stops from here on ({self.failed}); the step trains "
                        "as it would without it."
                    )
                self.seconds += time.perf_counter() - start
            return call(*args, **kwargs)

        return blamed

    def before_train_batch(
        self,
        train_batch: Callable,
        mini_batch: int,
        data: Any,
        loss_fn: Callable,
        loss_weight_fn: Callable,
    ) -> None:
        """The blame passes of one mini-batch, before its real ``train_batch``."""
        if not isinstance(data, dict) or "loss_mask" not in data:
            raise ValueError(
                "the mini-batch is not one dict of padded tensors with a loss_mask"
            )
        group, device = areal_compat.engine_dp_group(self.engine)
        ranks = dist.get_world_size(group) if group is not None else 1
        rank = dist.get_rank(group) if group is not None else 0
        own = _sample_rows(data)
        tokens = sample_tokens(data)
        counts = _gather_counts(len(own), group, ranks)
        with _isolated(self.engine) as passes:
            weight = torch.tensor([float(loss_weight_fn(data))], dtype=torch.float64)
            total = float(_all_sum(weight, group, device)[0])
            full = passes.run(train_batch, data, None, loss_fn, loss_weight_fn)
            # Per pass only numbers are kept: a gradient is the model's size.
            local = []
            for src in range(ranks):
                for k in range(counts[src]):
                    # Another rank's sample: this rank's masks all cleared.
                    row = own[k] if src == rank else -1
                    part = passes.run(train_batch, data, row, loss_fn, loss_weight_fn)
                    local.append(
                        (row, part.counts, [full.dot(part), part.sq, part.loss_sum])
                    )
        sums = _all_sum(
            torch.tensor(
                [full.sq, full.loss_sum] + [v for *_, values in local for v in values],
                dtype=torch.float64,
            ),
            group,
            device,
        ).tolist()
        self.mini_batches.append(
            {
                "mini_batch": mini_batch,
                "grad_norm": math.sqrt(sums[0]),
                "loss": sums[1] / total if total else math.nan,
                "loss_weight": total,
                "samples": sum(counts),
            }
        )
        for i, (row, token_counts, _) in enumerate(local):
            if row < 0:
                continue
            dot, sq, loss_sum = sums[2 + 3 * i : 5 + 3 * i]
            self.rows.append(
                {
                    "key": sample_key(tokens[row]),
                    "mini_batch": mini_batch,
                    "rank": rank,
                    "loss": loss_sum / total if total else math.nan,
                    "grad_norm": math.sqrt(sq) if sq >= 0 else math.nan,
                    "grad_dot": dot,
                    **token_counts,
                    **_row_values(data, row),
                }
            )


class _Pass:
    """One pass's gradient (this rank's shards, flattened) and what it read."""

    def __init__(self, grads: torch.Tensor, loss_sum: float, counts: dict):
        self.grads = grads
        self.sq = float(grads.double().pow(2).sum()) if grads.numel() else 0.0
        self.loss_sum = loss_sum
        self.counts = counts

    def dot(self, other: _Pass) -> float:
        return float((self.grads.double() * other.grads.double()).sum())


class _Passes:
    def __init__(self, engine: Any, rng: tuple):
        self.engine = engine
        self.rng = rng

    def run(
        self,
        train_batch: Callable,
        data: dict,
        row: int | None,
        loss_fn: Callable,
        loss_weight_fn: Callable,
    ) -> _Pass:
        """``train_batch`` on ``data`` with only sample ``row``'s loss tokens
        (None: all of them; -1: none), its optimizer step replaced by reading
        the gradients."""
        masked = dict(data)
        full = data["loss_mask"]
        if row is not None:
            keep = torch.zeros(full.shape[0], dtype=full.dtype, device=full.device)
            if row >= 0:
                keep[row] = 1
            masked["loss_mask"] = full * keep.reshape(-1, *([1] * (full.dim() - 1)))
        masked[_FULL_MASK] = full
        loss_sum = [0.0]

        def weight(mb: dict) -> Any:
            return loss_weight_fn({**mb, "loss_mask": mb[_FULL_MASK]})

        def loss(*args, **kwargs):
            mb = _input_of(args, kwargs)
            own, whole = float(loss_weight_fn(mb)), float(weight(mb))
            if own == 0:
                return args[0].sum() * 0.0
            value = loss_fn(*args, **kwargs)
            loss_sum[0] += float(value.detach()) * own
            return value * (own / whole)

        grads: list[torch.Tensor] = []

        def read_gradients(*args, **kwargs):
            grads.append(_flat_grads(self.engine))
            return {"update_successful": 0.0, "grad_norm": math.nan, "lr": math.nan}

        _set_rng(self.rng)
        before = areal_compat.stats_tracker_lengths()
        with areal_compat.shadowed(self.engine, "optimizer_step", read_gradients):
            train_batch(masked, loss_fn=loss, loss_weight_fn=weight)
        counts = areal_compat.loss_token_counts(before)
        return _Pass(grads[0], loss_sum[0], counts)


@contextlib.contextmanager
def _isolated(engine: Any) -> Iterator[_Passes]:
    """The passes leave the RNG and AReaL's statistics as they found them (the
    parameters and optimizer: no step is taken)."""
    rng = _get_rng()
    saved = areal_compat.stats_tracker_snapshot()
    try:
        yield _Passes(engine, rng)
    finally:
        areal_compat.restore_stats_tracker(saved)
        _set_rng(rng)
        areal_compat.zero_gradients(engine)


def _all_sum(t: torch.Tensor, group, device: str) -> torch.Tensor:
    if group is not None and dist.get_world_size(group) > 1:
        t = t.to(device)
        dist.all_reduce(t, group=group)
    return t.cpu()


def _gather_counts(n: int, group, ranks: int) -> list[int]:
    if ranks == 1:
        return [n]
    out = [None] * ranks
    dist.all_gather_object(out, n, group=group)
    return [int(c) for c in out]


def _get_rng() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return torch.get_rng_state(), cuda


def _set_rng(state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _parts(args: tuple, kwargs: dict) -> tuple[Any, Callable, Callable]:
    """(input_, loss_fn, loss_weight_fn) of a train_batch call."""
    names = ("input_", "loss_fn", "loss_weight_fn")
    given = dict(zip(names, args))
    given.update({k: v for k, v in kwargs.items() if k in names})
    return given["input_"], given["loss_fn"], given["loss_weight_fn"]


def _input_of(args: tuple, kwargs: dict) -> dict:
    """The micro-batch dict AReaL hands a loss function (its third argument)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, dict) and _FULL_MASK in a:
            return a
    raise ValueError("the loss function was called without its micro-batch")


def _flat_grads(engine: Any) -> torch.Tensor:
    """This rank's part of every gradient (``local_shard``, as the stage digests
    count it: a replica on another rank is counted there only), flattened, in
    float32 on the host (zeros for a parameter without one)."""
    parts = []
    for _, p in areal_compat.engine_named_parameters(engine):
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        local, _ = local_shard(g)
        if local is not None:
            parts.append(local.detach().reshape(-1).float().cpu())
    return torch.cat(parts) if parts else torch.zeros(0)


def _sample_rows(data: dict) -> list[int]:
    """The mini-batch's rows with loss tokens."""
    mask = data["loss_mask"]
    per_row = mask.reshape(mask.shape[0], -1).count_nonzero(dim=1)
    return [i for i, n in enumerate(per_row.tolist()) if n > 0]


def _row_values(data: dict, row: int) -> dict[str, Any]:
    """The sample's inputs to the loss, over its loss tokens: what a non-finite
    part is traced back through."""
    mask = data["loss_mask"][row].to("cpu").bool()
    out: dict[str, Any] = {"tokens": int(mask.sum())}

    def over_tokens(key: str) -> torch.Tensor | None:
        t = data.get(key)
        if not isinstance(t, torch.Tensor) or t.shape != data["loss_mask"].shape:
            return None
        return t[row].to("cpu").double()[mask]

    adv = over_tokens("advantages")
    if adv is not None:
        out["advantage"] = _mean(adv)
        out["advantage_finite"] = bool(torch.isfinite(adv).all())
    engine, trainer = over_tokens("logprobs"), over_tokens("prox_logp")
    if engine is not None:
        out["engine_logp_finite"] = bool(torch.isfinite(engine).all())
    if trainer is not None:
        out["trainer_logp_finite"] = bool(torch.isfinite(trainer).all())
    if engine is not None and trainer is not None:
        out["gap"] = _mean((trainer - engine).abs())
    return out


def _mean(t: torch.Tensor) -> float:
    return float(t.mean()) if t.numel() else math.nan
