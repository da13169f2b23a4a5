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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from areal_debug.stages.digest import _bits
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
    """One forward pass's sequences: ``((trajectory, sample), start, end)`` on the
    packed token dimension."""

    spans: list[tuple[tuple[int, int], int, int]] = field(default_factory=list)


class LayerDigests:
    """Hooks a model for one ``compute_logp`` call and digests its modules'
    outputs per trajectory into ``log`` (stage ``LAYERS_STAGE``)."""

    def __init__(self, log: StageLog, data: Any):
        self.log = log
        self.trajectories = _trajectory_keys(data)
        self.pieces = _Pieces()
        self.per_token = False
        # The first error in a hook: it stops the digests, never the forward pass.
        self.error: str | None = None
        # Each module's place in the order the forward pass ran them.
        self.order: dict[str, int] = {}

    @contextlib.contextmanager
    def hooked(self, model: torch.nn.Module) -> Iterator[None]:
        modules = digested_modules(model)
        tokens = sum(len(k) // 8 * len(v) for k, v in self.trajectories.items())
        self.per_token = tokens * len(modules) <= TOKEN_DIGESTS_AT_MOST
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
        """Before each micro-batch's forward: which trajectory each span holds."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.pieces = _Pieces()
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != 1:
            return  # not a packed row: nothing to cut
        bounds = next(
            (kwargs[k] for k in _BOUNDARIES if isinstance(kwargs.get(k), torch.Tensor)),
            None,
        )
        row = ids[0].to("cpu", torch.int64)
        cuts = [0, row.numel()] if bounds is None else bounds.cpu().tolist()
        taken: dict[bytes, int] = {}
        for start, end in zip(cuts[:-1], cuts[1:]):
            key = token_key(row[start:end])
            owners = self.trajectories.get(key)
            if not owners:
                continue  # padding, or a piece of a sequence cut elsewhere
            # Equal sequences (two identical samples): in order of appearance.
            n = taken.get(key, 0)
            taken[key] = n + 1
            self.pieces.spans.append((owners[min(n, len(owners) - 1)], start, end))

    def _output(self, name: str):
        def digest(module, args, output) -> None:
            out = output[0] if isinstance(output, (tuple, list)) else output
            if (
                not isinstance(out, torch.Tensor)
                or out.dim() < 2
                or not self.pieces.spans
            ):
                return
            row = out[0]
            position = self.order.setdefault(name, len(self.order))
            names = [
                layer_entry_name(*owner, position, name)
                for owner, _, _ in self.pieces.spans
            ]
            items = [
                (entry, row[start:end], 0)
                for entry, (_, start, end) in zip(names, self.pieces.spans)
            ]
            self.log.add_many(LAYERS_STAGE, items)
            if self.per_token:
                per_token = token_digests(row).cpu()
                for entry, (_, start, end) in zip(names, self.pieces.spans):
                    self.log.keep_always(LAYERS_STAGE, entry, per_token[start:end])

        return digest


def token_digests(x: torch.Tensor) -> torch.Tensor:
    """``[tokens, 2]`` int64: each token's (first dimension) digest of its values'
    bits, the same two sums as a tensor's digest (``digest.py``) over that
    token's row alone."""
    rows = x.detach().reshape(x.shape[0], -1)
    bits = _bits(rows).reshape(rows.shape).to(torch.int64)
    index = torch.arange(1, rows.shape[1] + 1, dtype=torch.int64, device=rows.device)
    return torch.stack([bits.sum(1), (bits * index).sum(1)], 1)


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
