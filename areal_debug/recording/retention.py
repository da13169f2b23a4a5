# SPDX-License-Identifier: Apache-2.0
"""Retention: which recorded steps and kept checkpoints a long dump run may delete.

The plan is a pure function of what is on disk and the policy, so it is tested
without a trainer; :func:`apply` carries it out on the coordinator only, one step
at a time and atomically (a step is renamed out of the recording's namespace
before its files are removed, so a reader never sees half a step).

What stays replayable: every step the policy keeps can be replayed from the first
recorded step; a *pinned* step N can be replayed with ``debug.replay_start_step=N``,
because the latest kept recover checkpoint at or before N-1 and every step after
it up to N are kept with it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from areal_debug.logs import get_logger
from areal_debug.recording.format import StepRanges, step_dirname

logger = get_logger("DebugRetention")

# A step or checkpoint directory being deleted: not a step-* name any more.
DELETING_PREFIX = ".deleting-"


def parse_steps(spec: str | None) -> list[tuple[int, int | None]] | None:
    """'0-9,50,100-' -> [(0, 9), (50, 50), (100, None)]; None means every step
    (``StepRanges``: the grammar every --steps reads too)."""
    ranges = StepRanges.parse(spec, "debug.record_steps=")
    return None if ranges is None else ranges.ranges


@dataclass
class RetentionPolicy:
    """What a dump run records and keeps (from the ``debug:`` section)."""

    record_steps: list[tuple[int, int | None]] | None = None
    record_every: int = 1
    keep_last_steps: int | None = None
    max_disk_bytes: int | None = None
    pinned: set[int] = field(default_factory=set)

    @classmethod
    def from_debug(cls, debug) -> RetentionPolicy:
        gb = debug.max_disk_gb
        keep = debug.keep_last_steps
        if keep is not None and debug.pin_on_anomaly:
            # An anomaly pins the steps before it: they must still be there.
            keep = max(keep, debug.anomaly_context_steps + 1)
        return cls(
            record_steps=parse_steps(debug.record_steps),
            record_every=debug.record_every,
            keep_last_steps=keep,
            max_disk_bytes=None if gb is None else int(gb * 2**30),
            pinned=set(debug.pin_steps or ()),
        )

    @property
    def deletes(self) -> bool:
        return self.keep_last_steps is not None or self.max_disk_bytes is not None

    def records(self, step: int) -> bool:
        """Whether the dump records ``step`` at all."""
        if step in self.pinned:
            return True
        if self.record_every > 1 and step % self.record_every:
            return False
        if self.record_steps is None:
            return True
        return any(
            lo <= step and (hi is None or step <= hi) for lo, hi in self.record_steps
        )


@dataclass
class Plan:
    delete_steps: list[int]
    delete_checkpoints: list[int]
    # Steps and checkpoints kept only because a pinned step needs them.
    kept_for_pins: list[int]


def protected(
    pinned: Iterable[int], steps: Iterable[int], checkpoints: Iterable[int]
) -> tuple[set[int], set[int]]:
    """Steps and checkpoints a replay of each pinned step needs."""
    steps, ckpts = set(steps), sorted(checkpoints)
    keep_steps, keep_ckpts = set(), set()
    for n in pinned:
        keep_steps.add(n)
        base = max((c for c in ckpts if c <= n - 1), default=None)
        if base is not None:
            keep_ckpts.add(base)
        first = -1 if base is None else base
        keep_steps.update(s for s in steps if first < s <= n)
    return keep_steps, keep_ckpts


def plan(
    policy: RetentionPolicy,
    step_bytes: Mapping[int, int],
    checkpoint_bytes: Mapping[int, int],
) -> Plan:
    """What to delete so the recording meets ``policy``: oldest unprotected first.

    ``step_bytes`` are the complete steps on disk and their sizes,
    ``checkpoint_bytes`` the kept recover checkpoints. The newest step is never
    deleted (it is the one just recorded), nor anything a pinned step needs.
    """
    steps = sorted(step_bytes)
    keep_steps, keep_ckpts = protected(policy.pinned, steps, checkpoint_bytes)
    newest = steps[-1] if steps else None
    deletable = [s for s in steps if s not in keep_steps and s != newest]
    delete: list[int] = []
    if policy.keep_last_steps is not None:
        # The ring buffer counts the newest steps, pinned ones included.
        recent = (
            set(steps[-policy.keep_last_steps :]) if policy.keep_last_steps else set()
        )
        delete = [s for s in deletable if s not in recent]
    # Checkpoints no kept step needs: one is needed by a kept step k when it is
    # the latest checkpoint before the first kept step of k's run of steps.
    remaining = [s for s in steps if s not in delete]
    useful = _useful_checkpoints(remaining, checkpoint_bytes) | keep_ckpts
    delete_ckpts = [c for c in checkpoint_bytes if c not in useful]
    if policy.max_disk_bytes is not None:
        total = sum(step_bytes[s] for s in remaining) + sum(
            checkpoint_bytes[c] for c in checkpoint_bytes if c not in delete_ckpts
        )
        for s in deletable:
            if total <= policy.max_disk_bytes:
                break
            if s not in delete:
                delete.append(s)
                total -= step_bytes[s]
        remaining = [s for s in steps if s not in delete]
        useful = _useful_checkpoints(remaining, checkpoint_bytes) | keep_ckpts
        delete_ckpts = [c for c in checkpoint_bytes if c not in useful]
    kept_for_pins = sorted((keep_steps - set(policy.pinned)) | keep_ckpts)
    return Plan(sorted(delete), sorted(delete_ckpts), kept_for_pins)


def _useful_checkpoints(steps: list[int], checkpoints: Mapping[int, int]) -> set[int]:
    """The checkpoints a kept step's replay can start from: the latest one before
    the step, when every step between them is kept too."""
    ckpts, kept = sorted(checkpoints), set(steps)
    # A checkpoint saved at or after the newest step serves the steps to come.
    useful = {c for c in ckpts if not steps or c >= max(steps)}
    for s in steps:
        base = max((c for c in ckpts if c <= s - 1), default=None)
        if base is not None and all(k in kept for k in range(base + 1, s + 1)):
            useful.add(base)
    return useful


def remove_whole(parent: str, name: str) -> None:
    """Rename ``parent/name`` out of the recording's namespace, then delete it."""
    src = os.path.join(parent, name)
    doomed = os.path.join(parent, DELETING_PREFIX + name)
    os.replace(src, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def apply(recording: str, result: Plan, kept_root: str) -> None:
    for step in result.delete_steps:
        remove_whole(recording, step_dirname(step))
    for step in result.delete_checkpoints:
        remove_whole(kept_root, step_dirname(step))
    if result.delete_steps or result.delete_checkpoints:
        logger.info(
            f"Retention: deleted steps {result.delete_steps or 'none'} and kept "
            f"checkpoints {result.delete_checkpoints or 'none'} from {recording}."
        )
