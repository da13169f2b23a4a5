# SPDX-License-Identifier: Apache-2.0
"""Which steps a replay runs: the one decision the replay (``modes/replay.py``) acts
on and its pre-flight (``areal-debug doctor``) checks.

A replay asked for step N restores the latest recover checkpoint kept with the
recording before N (``recording/checkpoints.py``) and replays from the step after
it, or from step 0 without one; it stops at ``debug.replay_end_step`` or
``total_train_steps``, whichever comes first, else where AReaL's training loop
ends (its epochs of the recording's steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from areal_debug.recording.checkpoints import latest_before
from areal_debug.recording.reader import RecordingReader


@dataclass(frozen=True)
class ReplayPlan:
    # The step asked for (debug.replay_start_step; 0 when not set).
    start_step: int
    # The kept recover checkpoint restored: the one saved after this step.
    checkpoint: int | None
    # The last step allowed (debug.replay_end_step, total_train_steps - 1); None:
    # the training loop's own end.
    last_step: int | None

    @classmethod
    def of(
        cls,
        recording: str,
        start_step: int | None,
        end_step: int | None,
        total_train_steps: int | None,
    ) -> ReplayPlan:
        """The plan for replaying ``recording`` with these ``debug.*`` and config values."""
        start = start_step or 0
        last = end_step
        if total_train_steps is not None and (
            last is None or last > total_train_steps - 1
        ):
            last = total_train_steps - 1
        return cls(start, latest_before(recording, start), last)

    @property
    def first_step(self) -> int:
        """The first step the replay runs: the one after the restored checkpoint."""
        return 0 if self.checkpoint is None else self.checkpoint + 1

    @property
    def rebuilt_steps(self) -> range:
        """Steps replayed only to rebuild the policy before ``start_step``."""
        return range(self.first_step, self.start_step)

    @property
    def recover_mode(self) -> str:
        # Only a checkpoint kept with the recording is restored, never one an
        # earlier replay left in its own trial.
        return "on" if self.checkpoint is not None else "disabled"

    @property
    def total_train_steps(self) -> int | None:
        """``total_train_steps`` the trainer runs with (None: as configured)."""
        return None if self.last_step is None else self.last_step + 1

    def stop(self, total_epochs: int, steps_per_epoch: int) -> int:
        """The step after the last one replayed, for a loop of ``total_epochs``
        epochs of ``steps_per_epoch`` steps (AReaL's PPOTrainer.train)."""
        stop = total_epochs * steps_per_epoch
        return stop if self.last_step is None else min(stop, self.last_step + 1)


def needs_teacher_servers(config, manifest) -> bool:
    """The run's teacher is served as an inference engine and the recording holds
    no teacher log-probs to stand in for it: a replay refuses such a run."""
    teacher = getattr(config, "teacher", None)
    return (
        teacher is not None
        and getattr(teacher, "engine_type", None) == "rollout"
        and not manifest.recorded_teacher_logp
    )


# Why a replay cannot re-make a step of a run with actor.adaptive_tree (AReaL
# after cbff54d, rl_trainer.py: begin_adaptive_cycle before the log-prob
# recompute, its state in the recover checkpoint's extra_state).
ADAPTIVE_TREE_WHY = (
    "actor.adaptive_tree re-plans the tree layout (data x context parallel) from "
    "each step's workload and carries its planner's state from step to step in "
    "the recover checkpoint's extra_state, which areal-debug does not record"
)


def uses_adaptive_tree(config) -> bool:
    """The run plans its tree layout adaptively (``actor.adaptive_tree`` set)."""
    return getattr(getattr(config, "actor", None), "adaptive_tree", None) is not None


# -- debug.drop_samples: what a recording can replay without --------------------------
def samples_of(traj) -> int:
    """The samples (rows) of a recorded group's dict."""
    ids = traj.get("input_ids")
    return int(ids.shape[0]) if ids is not None and ids.dim() == 2 else 1


def drop_problems(config, reader: RecordingReader, debug) -> list[str]:
    """Why debug.drop_samples cannot be replayed from this recording (each a
    sentence; none where it can): the replay's refusal and doctor's findings."""
    drops = debug.dropped_samples()
    if not drops:
        return []
    norm = getattr(config.actor, "reward_norm", None)
    group_normalised = "group" in (
        getattr(norm, "mean_level", None),
        getattr(norm, "std_level", None),
    )
    return check_drops(reader, drops, group_normalised)


def check_drops(
    reader: RecordingReader,
    drops: dict[int, dict[int, frozenset[int] | None]],
    group_normalised: bool,
) -> list[str]:
    """Why debug.drop_samples cannot be replayed (a step, group or sample the
    recording lacks; a sample alone out of a group AReaL normalises), each a
    sentence; empty when it can."""
    problems = []
    for step, groups in sorted(drops.items()):
        if not reader.has_step(step):
            problems.append(f"step {step} is not in the recording")
            continue
        batch = reader.load_batch(step)
        for group, samples in sorted(groups.items()):
            if group >= len(batch):
                problems.append(
                    f"step {step} has groups 0-{len(batch) - 1}, not group {group}"
                )
                continue
            n = samples_of(batch[group])
            missing = sorted(s for s in samples or () if s >= n)
            if missing:
                problems.append(
                    f"step {step} group {group} has samples 0-{n - 1}, not "
                    f"{', '.join(map(str, missing))}"
                )
            elif samples is not None and group_normalised and len(samples) < n:
                problems.append(
                    f"step {step} group {group}: AReaL normalises rewards in groups "
                    f"of {n} here (actor.reward_norm at group level), so a sample "
                    f"cannot leave its group alone; drop the whole group "
                    f"({step}:{group}/*)"
                )
    return problems
