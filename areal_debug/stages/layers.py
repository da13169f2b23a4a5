# SPDX-License-Identifier: Apache-2.0
"""Layer digests: below the log-probs stage, each decoder layer's output, per sequence.

Taken in the forward pass that computes the step's log-probs (the actor's
``compute_logp``), by forward hooks on the model for the length of that call:
each decoder layer's children (its norms, its attention, its MLP) and the layer
itself, then the final norm and the logits (``lm_head``). AReaL packs a
micro-batch's sequences into one row (``input_ids`` ``[1, T]`` with their
boundaries, ``cu_seq_lens_q``); the hooks cut every output at those boundaries,
so each trajectory is digested on its own and a replay that packs the
micro-batches another way (``mb_spec``) still compares trajectory by trajectory.
A piece is named for the sample whose tokens it holds and the module's place in
the order the pass ran them ("trajectory 5 sample 1 @1 model.layers.0.self_attn":
the log-probs stage's trajectory, a dict of the batch, and its row), found by its token ids, not by its place in the
micro-batch. Padding, and any piece whose tokens
are no trajectory's (sequence parallelism cuts sequences across ranks), is not
digested.

Where a call's tokens times its modules are few enough (``TOKEN_DIGESTS_AT_MOST``)
each piece's per-token digests are kept too (``[tokens, 2]`` int64, in
``stage_tensors.pt``): then a report names the first token that differs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.stages.digest import span_digests, token_digests
from areal_debug.stages.names import LAYERS_STAGE, layer_entry_name
from areal_debug.stages.stage_log import StageLog

# Per-token digests are kept when a call's tokens x modules is at most this: 16
# bytes each, 4 MiB a call at most (the CPU demo: ~15,000).
TOKEN_DIGESTS_AT_MOST = 1 << 18
# What FSDP, activation checkpointing and torch.compile put into module names.
_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
# The keyword arguments that carry a packed micro-batch's sequence boundaries, in
# the order tried (AReaL's FSDP engine passes all three: fsdp_engine.py
# _prepare_mb_list).
_BOUNDARIES = ("cu_seq_lens_q", "cu_seqlens")


def display_name(name: str) -> str:
    for wrapper in _WRAPPERS:
        name = name.replace(wrapper, "")
    return name


def digested_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of what is digested: in each decoder layer (the
    children of the model's ``layers`` list) its direct children and the layer
    itself; then the siblings of that list that are norms (the final norm) and
    the output head (the logits). Empty for a model without a ``layers`` list."""
    named = dict(model.named_modules())
    lists = [
        (n, m)
        for n, m in named.items()
        if isinstance(m, torch.nn.ModuleList) and display_name(n).endswith("layers")
    ]
    if not lists:
        return []
    list_name, layers = max(lists, key=lambda nm: len(nm[1]))
    parent = list_name.rpartition(".")[0]
    out: list[tuple[str, torch.nn.Module]] = []
    for i, layer in enumerate(layers):
        prefix = f"{list_name}.{i}"
        for child, module in layer.named_children():
            if child not in ("_checkpoint_wrapped_module", "_fsdp_wrapped_module"):
                out.append((display_name(f"{prefix}.{child}"), module))
        out.append((display_name(prefix), layer))
    for n, m in named.items():
        if n.rpartition(".")[0] == parent and "norm" in n.rpartition(".")[2].lower():
            out.append((display_name(n), m))
    head = (
        model.get_output_embeddings()
        if hasattr(model, "get_output_embeddings")
        else None
    )
    if isinstance(head, torch.nn.Module):
        name = next((n for n, m in named.items() if m is head), "lm_head")
        out.append((display_name(name), head))
    return out


@dataclass
class _Pieces:
    """One forward pass's sequences: ``((trajectory, sample), row, start, end)``:
    the row of the batch (0 for a packed micro-batch) and the span in it."""

    spans: list[tuple[tuple[int, int], int, int, int]] = field(default_factory=list)
    # The forward's (rows, tokens): an output is cut only where it has that shape.
    shape: tuple[int, ...] = ()


class LayerDigests:
    """Hooks a model for one ``compute_logp`` call and digests its modules'
    outputs per sample into ``log`` (stage ``LAYERS_STAGE``)."""

    def __init__(self, log: StageLog, data: Any):
        self.log = log
        self.trajectories = _trajectory_keys(data)
        self.pieces = _Pieces()
        # Keep each piece's per-token digests (a report then names the token).
        self.keep_tokens = False
        # The first error in a hook: it stops the digests, never the forward pass.
        self.error: str | None = None
        # Each module's place in the order the forward pass ran them.
        self.order: dict[str, int] = {}
        # How many sequences of each key the call has met (equal samples).
        self.taken: dict[bytes, int] = {}

    @contextlib.contextmanager
    def hooked(self, model: torch.nn.Module) -> Iterator[None]:
        modules = digested_modules(model)
        tokens = sum(len(k) // 8 * len(v) for k, v in self.trajectories.items())
        self.keep_tokens = tokens * len(modules) <= TOKEN_DIGESTS_AT_MOST
        handles = [
            model.register_forward_pre_hook(
                self._guarded(self._inputs), with_kwargs=True
            )
        ]
        for name, module in modules:
            handles.append(
                module.register_forward_hook(self._guarded(self._output(name)))
            )
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _guarded(self, hook):
        def guarded(*args) -> None:
            if self.error is not None:
                return
            try:
                hook(*args)
            except Exception as e:  # noqa: BLE001 - never the training step's error
                self.error = repr(e)

        return guarded

    def _inputs(self, module, args, kwargs) -> None:
        """Before each micro-batch's forward: which sample each span holds."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.pieces = _Pieces()
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            return
        rows = ids.to("cpu", torch.int64)
        self.pieces.shape = tuple(rows.shape)
        bounds = next(
            (kwargs[k] for k in _BOUNDARIES if isinstance(kwargs.get(k), torch.Tensor)),
            None,
        )
        if rows.shape[0] == 1 and bounds is not None:
            # AReaL's packed micro-batch: one row, cut at the boundaries.
            cuts = bounds.cpu().tolist()
            for start, end in zip(cuts[:-1], cuts[1:]):
                self._span(rows[0], 0, start, end)
            return
        # A batch of rows, each a sequence (its tokens where its mask is set).
        mask = kwargs.get("attention_mask")
        for r in range(rows.shape[0]):
            start, end = 0, rows.shape[1]
            if isinstance(mask, torch.Tensor) and mask.shape == ids.shape:
                where = mask[r].nonzero().reshape(-1).tolist()
                if not where or where[-1] - where[0] + 1 != len(where):
                    continue  # no tokens, or not one run of them
                start, end = where[0], where[-1] + 1
            self._span(rows[r], r, start, end)

    def _span(self, row: torch.Tensor, r: int, start: int, end: int) -> None:
        key = token_key(row[start:end])
        owners = self.trajectories.get(key)
        if not owners:
            return  # padding, or a piece of a sequence cut elsewhere
        # Equal sequences (two identical samples): in order of appearance.
        n = self.taken.get(key, 0)
        self.taken[key] = n + 1
        self.pieces.spans.append((owners[min(n, len(owners) - 1)], r, start, end))

    def _output(self, name: str):
        def digest(module, args, output) -> None:
            out = output[0] if isinstance(output, (tuple, list)) else output
            spans = self.pieces.spans
            if not (isinstance(out, torch.Tensor) and spans):
                return
            if out.dim() < 3 or tuple(out.shape[:2]) != self.pieces.shape:
                return  # not laid out by rows and tokens (a router's flat output)
            position = self.order.setdefault(name, len(self.order))
            names = [layer_entry_name(*owner, position, name) for owner, *_ in spans]
            if not self.keep_tokens:
                self.log.add_many(
                    LAYERS_STAGE,
                    [
                        (entry, out[r, start:end], 0)
                        for entry, (_, r, start, end) in zip(names, spans)
                    ],
                )
                return
            # Each token digested once, in one pass per row; the samples' digests
            # follow from their tokens' (span_digests), which are kept.
            t0 = time.perf_counter()
            rows = sorted({r for _, r, _, _ in spans})
            per_row = {r: token_digests(out[r]) for r in rows}
            width = out[0, 0].numel()
            pairs = torch.empty((len(spans), 2), dtype=torch.int64, device=out.device)
            for r in rows:
                at = [i for i, span in enumerate(spans) if span[1] == r]
                bounds = [(spans[i][2], spans[i][3]) for i in at]
                pairs[at] = span_digests(per_row[r], bounds, width)
            self.log.add_pairs(LAYERS_STAGE, names, pairs)
            on_host = {r: t.cpu() for r, t in per_row.items()}
            for entry, (_, r, start, end) in zip(names, spans):
                self.log.keep_always(LAYERS_STAGE, entry, on_host[r][start:end])
            self.log.seconds += time.perf_counter() - t0

        return digest


def sample_tokens(traj: Any) -> list[torch.Tensor]:
    """Each sample's (row's) tokens of a trajectory dict, where its attention
    mask is set, int64 on the host: what a packed micro-batch holds of it, and
    the key its rows are found by wherever AReaL moved them."""
    ids = traj.get("input_ids") if isinstance(traj, dict) else None
    if not isinstance(ids, torch.Tensor) or ids.dim() > 2:
        return []
    rows = ids.reshape(-1, ids.shape[-1]).to("cpu", torch.int64)
    mask = traj.get("attention_mask")
    if not (isinstance(mask, torch.Tensor) and mask.shape == ids.shape):
        return list(rows)
    keep = mask.reshape(rows.shape).to("cpu").bool()
    return [rows[r][keep[r]] for r in range(rows.shape[0])]


def token_key(tokens: torch.Tensor) -> bytes:
    return tokens.to(torch.int64).numpy().tobytes()


def _trajectory_keys(data: Any) -> dict[bytes, list[tuple[int, int]]]:
    """Each sample's tokens to ``(trajectory, sample)``: its dict in ``data``
    and its row in that dict (a group's samples share a dict)."""
    out: dict[bytes, list[tuple[int, int]]] = {}
    for i, traj in enumerate(data if isinstance(data, list) else []):
        for r, tokens in enumerate(sample_tokens(traj)):
            out.setdefault(token_key(tokens), []).append((i, r))
    return out
