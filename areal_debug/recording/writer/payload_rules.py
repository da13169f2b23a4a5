# SPDX-License-Identifier: Apache-2.0
"""What a payload may hold (weights-only loadable values) and how a batch is described."""

from __future__ import annotations

from typing import Any

import torch

from areal_debug.recording.contents import BatchContents
from areal_debug.recording.packed_payload import unpack

# Plain values that torch.load(weights_only=True) reconstructs without running
# code. Anything else would need a pickle allowlist, which we refuse to grow.
_PLAIN_SCALARS = (type(None), bool, int, float, str)


def check_storable(value: Any, where: str) -> None:
    """Raise TypeError if ``value`` cannot round-trip through a weights_only load."""
    if isinstance(value, torch.Tensor) or isinstance(value, _PLAIN_SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_storable(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str | int):
                raise TypeError(
                    f"{where} has a key of type {type(k).__name__}; recordings keep "
                    "only str or int dict keys."
                )
            check_storable(item, f"{where}[{k!r}]")
        return
    raise TypeError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which "
        "a recording cannot store: payloads must load with "
        "torch.load(weights_only=True), so they hold only tensors, numbers, "
        "strings, None and lists/tuples/dicts of those. Convert the value in your "
        "workflow (e.g. numpy array -> torch.tensor) or drop the key."
    )


def describe_batch(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, keys and dtypes of one shard, and each sample's contents
    digested (``contents.py``), for its metadata file.

    One flattening call per quantity, not a small op per trajectory: this runs
    beside training, for hundreds of trajectories a step, and every torch call
    takes the GIL back from a training thread that may hold it for a while.
    """
    keys: dict[str, str] = {}
    masks: list[torch.Tensor] = []
    versions: list[torch.Tensor] = []
    loss_masks: list[torch.Tensor] = []
    loose: list[torch.Tensor] = []  # versions without a matching loss_mask
    for traj in batch:
        for k, v in traj.items():
            if isinstance(v, torch.Tensor):
                keys.setdefault(k, str(v.dtype).removeprefix("torch."))
            else:
                keys.setdefault(k, type(v).__name__)
        mask = traj.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            masks.append(mask)
        v = traj.get("versions")
        if isinstance(v, torch.Tensor):
            # Only generated tokens carry a policy version: prompts hold -1 and
            # right-padding holds the pad value, so select by loss_mask.
            lm = traj.get("loss_mask")
            if isinstance(lm, torch.Tensor) and lm.shape == v.shape:
                versions.append(v)
                loss_masks.append(lm)
            else:
                loose.append(v)
    out: dict[str, Any] = {
        "num_trajectories": len(batch),
        "num_sequences": sum(int(m.shape[0]) if m.dim() > 1 else 1 for m in masks),
        "num_tokens": int(_flat(masks).count_nonzero()) if masks else 0,
        "keys": dict(sorted(keys.items())),
        "policy_version": None,
        "contents": BatchContents.of_batch(batch).to_json(),
    }
    generated = []
    if versions:
        generated.append(_flat(versions)[_flat(loss_masks) != 0])
    if loose:
        flat = _flat(loose)
        generated.append(flat[flat >= 0])
    allv = torch.cat(generated) if generated else None
    if allv is not None and allv.numel():
        out["policy_version"] = [int(allv.min()), int(allv.max())]
    return out


def describe_packed(packed: dict[str, Any]) -> dict[str, Any]:
    """The shard description of a packed batch, read off what is stored."""
    return describe_batch(unpack(packed, copy=False))


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' elements in one 1-D tensor, in one call (one dtype)."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        tensors = [t.to(torch.int64) for t in tensors]
    return torch._C._nn.flatten_dense_tensors(tensors)
