# SPDX-License-Identifier: Apache-2.0
"""The reference model's recorded log-probs in place of its forward pass (replay).

A dump with ``debug.record_ref_logp`` keeps each rank's reference log-probs,
trajectory by trajectory, in the step's stage tensors. A replay with
``debug.replay_recorded_ref_logp`` hands each rank its own before the step, and
the reference engine's ``compute_logp`` returns them instead of running the
model: identical to the dump's by construction, and the reference model's
forward pass (counted on the engine) never runs. The rank's trajectories must be
the ones it had in the dump: the same data-parallel layout.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from areal_debug.recording.format import RecordingError
from areal_debug.stages.names import (
    StageKeyError,
    StageTensorKey,
    trajectory_index,
)

STAGE = "ref_logp"


def ref_logp_tensors(
    tensors: dict[str, torch.Tensor] | None,
) -> dict[str, torch.Tensor]:
    """The reference log-probs among a step's recorded stage tensors (all ranks;
    not the tokens kept beside them)."""
    out = {}
    for text, t in (tensors or {}).items():
        key = _key(text)
        if key.stage == STAGE and trajectory_index(key.name) is not None:
            out[text] = t
    return out


def _key(text: str) -> StageTensorKey:
    try:
        return StageTensorKey.parse(text)
    except StageKeyError as e:
        raise RecordingError(
            f"The recording's stage tensors hold a malformed key: {e} Re-record the "
            "step, or replay without debug.replay_recorded_ref_logp."
        ) from None


class RecordedRefLogp:
    """The reference engine's log-probs of one rank, from the recording
    (``StageProbes`` wraps its ``compute_logp`` with ``stand_in``)."""

    def __init__(self, rank: int | None = None):
        # The stage tensors name ranks as the step's gather does: global ranks.
        if rank is None:
            rank = dist.get_rank() if dist.is_initialized() else 0
        self.rank = rank
        self._pending: tuple[int, list[torch.Tensor]] | None = None

    def hand_over(self, step: int, tensors: dict[str, torch.Tensor]) -> None:
        """This step's recorded stage tensors (every rank's); keeps this rank's."""
        mine: dict[int, torch.Tensor] = {}
        for text, t in tensors.items():
            key = _key(text)
            i = trajectory_index(key.name)
            if (key.rank, key.stage) == (self.rank, STAGE) and i is not None:
                mine[i] = t
        if sorted(mine) != list(range(len(mine))) or not mine:
            raise RecordingError(
                f"Step {step} of the recording holds no complete reference log-probs "
                f"for rank {self.rank}, so debug.replay_recorded_ref_logp=true cannot "
                "stand in for the reference model. Record with "
                "debug.record_ref_logp=true, or replay without the option."
            )
        self._pending = (step, [mine[i] for i in range(len(mine))])

    def stand_in(self, compute_logp):
        """``compute_logp`` of the reference engine, replaced (``MethodPatches``)."""

        def recorded(data: Any, *args, **kwargs):
            if self._pending is None:
                raise RecordingError(
                    "The reference model was asked for log-probs, but no recorded "
                    "ones were handed over for this step (a second reference pass "
                    "in one step?). Replay without debug.replay_recorded_ref_logp."
                )
            step, logps = self._pending
            self._pending = None
            one = isinstance(data, dict)
            batch = [data] if one else list(data)
            self._check(step, batch, logps)
            device = batch[0]["input_ids"].device
            out = [t.to(device) for t in logps]
            return out[0] if one else out

        return recorded

    def _check(self, step: int, batch: list, logps: list[torch.Tensor]) -> None:
        shapes = [tuple(traj["input_ids"].shape) for traj in batch]
        recorded = [tuple(t.shape) for t in logps]
        if shapes != recorded:
            raise RecordingError(
                f"Step {step}: rank {self.rank} recorded reference log-probs shaped "
                f"{recorded}, but its trajectories in this replay are shaped "
                f"{shapes}. The data-parallel layout differs from the dump's: "
                "replay on the dump's layout, or without "
                "debug.replay_recorded_ref_logp."
            )
