# SPDX-License-Identifier: Apache-2.0
"""``debug.replay_recorded_ref_logp``: the recorded reference log-probs stand in for
the reference model's forward pass in a replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from areal_debug.compare.report import TopologyChange
from areal_debug.logs import get_logger
from areal_debug.modes.replay_setup import UnsupportedReplayError
from areal_debug.recording.reader import RecordingReader
from areal_debug.stages.recorded_ref_logp import ref_logp_tensors

logger = get_logger("DebugReplay")


class RecordedReference:
    """Whether the recorded reference log-probs are used, their checks, and handing
    them to the probes each step."""

    def __init__(
        self,
        reader: RecordingReader,
        recorded_stages: Callable[[int], Any],
        requested: bool,
        has_ref: bool,
    ):
        self.reader = reader
        self._recorded_stages = recorded_stages
        self.requested = requested
        self.has_ref = has_ref

    @property
    def used(self) -> bool:
        return self.requested and self.has_ref

    @property
    def source(self) -> str:
        """Where the replay's reference log-probs come from (the report says it)."""
        return "recorded" if self.used else "computed"

    def check_layout(self, topology: TopologyChange) -> None:
        """Before the probes are installed: the option fits this run."""
        if not self.requested:
            return
        if not self.has_ref:
            logger.warning(
                "debug.replay_recorded_ref_logp=true, but this run has no reference "
                "model (ref with actor.kl_ctl > 0): the option changes nothing."
            )
            return
        if topology.changed:
            raise UnsupportedReplayError(
                "debug.replay_recorded_ref_logp=true needs the dump run's "
                "data-parallel layout (each rank's recorded reference log-probs "
                f"are its own trajectories'), but {topology.describe()} Replay on "
                "the dump's layout, or without the option (the reference model "
                "then runs)."
            )
        logger.info(
            "Replay: the reference log-probs come from the recording "
            "(debug.replay_recorded_ref_logp): the reference model's forward pass "
            "does not run, and its stage is identical to the dump's by construction."
        )

    def check_probed(self, stage_probes) -> None:
        """After the probes are installed: something stands in for the forward pass."""
        if self.used and stage_probes is None:
            raise UnsupportedReplayError(
                "debug.replay_recorded_ref_logp=true, but the reference engine is "
                "not probed (stage digests cover AReaL's FSDP engines), so nothing "
                "can stand in for its forward pass. Replay without the option."
            )

    def require(self, start: int) -> None:
        """The recording holds reference log-probs from the first replayed step."""
        if self.used and not self.tensors(start):
            raise UnsupportedReplayError(
                f"debug.replay_recorded_ref_logp=true, but step {start} of the "
                f"recording at {self.reader.path} holds no reference log-probs. "
                "Record with debug.record_ref_logp=true (or "
                "debug.record_stage_tensors=true), or replay without the option."
            )

    def tensors(self, step: int) -> dict:
        """The step's recorded reference log-probs."""
        _, tensors = self._recorded_stages(step)
        return ref_logp_tensors(tensors)

    def log_summary(self, forwards: int) -> None:
        if self.used:
            logger.info(
                "Reference log-probs taken from the recording at every step "
                "(identical by construction); reference forward passes run: "
                f"{forwards}."
            )
