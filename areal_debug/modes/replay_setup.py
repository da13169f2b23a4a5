# SPDX-License-Identifier: Apache-2.0
"""A replay before its first step: the recording it opens, the runs it refuses,
the config it adjusts to its plan (``replay_plan.py``) and the kept checkpoint it
restores."""

from __future__ import annotations

from areal_debug.logs import get_logger
from areal_debug.recording import checkpoints
from areal_debug.recording.format import RecordingError
from areal_debug.recording.lock import describe
from areal_debug.recording.reader import RecordingReader, format_ranges
from areal_debug.replay_plan import (
    ADAPTIVE_TREE_WHY,
    ReplayPlan,
    drop_problems,
    needs_teacher_servers,
    uses_adaptive_tree,
)

logger = get_logger("DebugReplay")


class UnsupportedReplayError(RecordingError):
    """A run whose replay cannot be made inference-free (yet)."""


def open_recording(path: str) -> RecordingReader:
    """The recording to replay; a warning if a dump run is still writing it."""
    reader = RecordingReader(path)
    writer = reader.writer()
    if writer is not None:
        logger.warning(
            f"The recording at {path} is still being written by a "
            f"dump run ({describe(writer)}). This replay uses the steps that "
            f"are complete ({format_ranges(reader.available_steps())}); "
            "if that run deletes old steps (debug.keep_last_steps, "
            "debug.max_disk_gb), pin the ones you replay (debug.pin_steps)."
        )
    return reader


def refuse_unsupported(config, manifest) -> None:
    """Runs a replay cannot make inference-free: one clear message each."""
    if needs_teacher_servers(config, manifest):
        raise UnsupportedReplayError(
            "This run has a teacher served as an inference engine "
            "(teacher.engine_type=rollout), but the recording holds no teacher "
            "log-probs (recorded in SPMD mode, without a teacher, or by an older "
            "areal-debug), so the replay would have to start the "
            "teacher's servers. Record in single-controller mode "
            "(scheduler.type=local) with the teacher, use teacher.engine_type=train "
            "(the teacher runs on the training side and replays as usual), or "
            "replay without the teacher (teacher=null)."
        )
    if uses_adaptive_tree(config):
        raise UnsupportedReplayError(
            f"This run sets actor.adaptive_tree, which a replay cannot re-make bit "
            f"for bit: {ADAPTIVE_TREE_WHY}. Replay with actor.adaptive_tree=null "
            "(the step then trains with the static layout, and the story names the "
            "change), or record and replay without it."
        )


def refuse_bad_drops(config, reader: RecordingReader, debug) -> None:
    """debug.drop_samples that this recording cannot replay: every reason, before
    any model is built."""
    problems = drop_problems(config, reader, debug)
    if problems:
        raise UnsupportedReplayError(
            f"debug.drop_samples={debug.drop_samples!r} cannot be replayed: "
            + "; ".join(problems)
            + ". The numbering is the recording's (areal-debug show REC --step N)."
        )


def adjust_config(config, plan: ReplayPlan) -> None:
    """The trainer's config for the plan: no weights sent, the plan's recover
    checkpoint and last step."""
    if config.actor.weight_update_mode != "disk":
        # xccl would open a weight-update group towards inference servers
        # in __init__; replay sends no weights, so the mode is irrelevant.
        logger.info(
            f"Replay: actor.weight_update_mode={config.actor.weight_update_mode} "
            "read as 'disk' (replay sends no weights anywhere)."
        )
        config.actor.weight_update_mode = "disk"
    if config.recover.mode != plan.recover_mode:
        logger.info(
            f"Replay: recover.mode={config.recover.mode} read as {plan.recover_mode!r}."
        )
        config.recover.mode = plan.recover_mode
    total = plan.total_train_steps
    if total is not None and total != config.total_train_steps:
        logger.info(
            f"Replay: stopping after step {plan.last_step} (debug.replay_end_step)."
        )
        config.total_train_steps = total


def install_checkpoint(trainer, topology, recording: str, step: int) -> None:
    """Put the dump run's kept recover checkpoint of ``step`` where AReaL's
    RecoverHandler loads it (the coordinator copies, every process waits)."""
    if topology.is_coordinator():
        config = trainer.config
        names = checkpoints.model_names(config)
        checkpoints.install(config, recording, step, names, topology.process_count())
    topology.barrier(trainer)
    logger.info(
        f"Replay: restoring the dump run's recover checkpoint of step {step} "
        f"(kept with the recording) to start at step {step + 1}."
    )


def announce_start(start: int, asked: int | None) -> None:
    """Say where the replay starts against the step asked for
    (``debug.replay_start_step``)."""
    if asked is None:
        return
    if asked <= start:
        logger.info(
            f"Replay: starting at step {start} (debug.replay_start_step={asked})."
        )
        return
    logger.info(
        f"Replay: debug.replay_start_step={asked}, but no recover checkpoint of "
        f"the dump run restores the policy before step {asked}; replaying from "
        f"step {start} to rebuild it (no inference, so cheap). Steps before "
        f"{asked} are compared too."
    )
