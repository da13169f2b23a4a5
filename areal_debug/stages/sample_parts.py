# SPDX-License-Identifier: Apache-2.0
"""A blamed step's sample parts as a run writes them (``blame/step-N.json`` in its
log folder) and reads them back: the shares, and where a non-finite step's
first non-finite part entered (docs/format.md "Sample parts").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any

from areal_debug.recording.format import BLAME_DIRNAME, RecordingError, step_dirname


def sample_key(tokens) -> str:
    """A sample's name by its tokens (int64, where its attention mask is set):
    the recorded row it is, wherever AReaL moved it (``attach_recorded``)."""
    from areal_debug.stages.layers import token_key

    return hashlib.sha1(token_key(tokens)).hexdigest()[:16]


# What a blame file holds (docs/format.md "Sample parts").
BLAME_FORMAT = 1


def blame_path(log_dir: str, step: int) -> str:
    """Where a run writes step ``step``'s parts: ``blame/step-N.json`` in its
    log folder (a replay's: beside its report)."""
    return os.path.join(log_dir, BLAME_DIRNAME, f"{step_dirname(step)}.json")


def step_parts(
    step: int, gathered: list[dict[str, Any]], recording: str
) -> dict[str, Any]:
    """Every rank's ``SampleBlame.take`` as one step: the samples with their
    shares. loss_share: the sample's absolute loss contribution over the step's
    sum of them (a PPO loss with normalised advantages sums to near zero);
    grad_share: its gradient projected on its mini-batch's, over the sum of the
    mini-batches' squared gradient norms (signed; the step's add up to 1)."""
    samples = [row for rank in gathered for row in rank["samples"]]
    mini_batches = gathered[0]["mini_batches"]
    abs_loss = sum(abs(s["loss"]) for s in samples)
    sq = sum(m["grad_norm"] ** 2 for m in mini_batches)
    for s in samples:
        s["loss_share"] = abs(s["loss"]) / abs_loss if abs_loss else math.nan
        s["grad_share"] = s["grad_dot"] / sq if sq else math.nan
    failed = [r["failed"] for r in gathered if r.get("failed")]
    return {
        "format": BLAME_FORMAT,
        "step": step,
        # The recording the step's batch is (rewards, text, the one numbering).
        "recording": os.path.abspath(recording),
        "samples": samples,
        "mini_batches": mini_batches,
        "seconds": max(r["seconds"] for r in gathered),
        "failed": failed[0] if failed else None,
    }


def read_parts(log_dir: str, step: int) -> dict[str, Any]:
    """Step ``step``'s parts as the run in ``log_dir`` wrote them; a
    ``RecordingError`` saying how to compute them where there are none."""
    path = blame_path(log_dir, step)
    if not os.path.exists(path):
        written = (
            sorted(os.listdir(os.path.dirname(path)))
            if os.path.isdir(os.path.dirname(path))
            else []
        )
        have = f" (it has {', '.join(written)})" if written else ""
        raise RecordingError(
            f"No sample parts of step {step} in {log_dir}{have}: each sample's part "
            f"is computed by a run with debug.blame_steps={step}. Replay the "
            f"recording with debug.blame_steps={step} (and "
            "debug.replay_trial_name=blame), then run this on that replay's log "
            "folder."
        )
    with open(path) as f:
        doc = json.load(f)
    if doc.get("format") != BLAME_FORMAT:
        raise RecordingError(
            f"{path} is in sample-parts format {doc.get('format')!r}; this "
            f"areal-debug reads format {BLAME_FORMAT}. Use the areal-debug that "
            "wrote it, or compute the parts again with this one."
        )
    return doc


def attach_recorded(samples: list[dict[str, Any]], batch: list) -> list[str]:
    """Each sample's place in the recorded batch (``group``, ``sample``: the one
    numbering) and its recorded reward, paired by its tokens; the keys of the
    samples no recorded row has (none, unless the recording is not the run's)."""
    import torch

    from areal_debug.stages.layers import sample_tokens

    places: dict[str, list[tuple[int, int, float | None]]] = {}
    for g, traj in enumerate(batch):
        rewards = traj.get("rewards") if isinstance(traj, dict) else None
        for r, tokens in enumerate(sample_tokens(traj)):
            reward = None
            if isinstance(rewards, torch.Tensor) and rewards.numel() > r:
                reward = float(rewards.reshape(-1)[r])
            places.setdefault(sample_key(tokens), []).append((g, r, reward))
    unpaired = []
    for s in samples:
        queue = places.get(s["key"])
        if not queue:
            unpaired.append(s["key"])
            continue
        s["group"], s["sample"], reward = queue.pop(0)
        if reward is not None:
            s["reward"] = reward
            s["reward_finite"] = math.isfinite(reward)
    return unpaired


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def ranked(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples by |grad_share|, largest first (those without a finite share
    last), ties in the one numbering: the order ``blame`` and the page show."""

    def rank(s: dict[str, Any]) -> tuple:
        share = s.get("grad_share")
        known = _finite(share)
        return (
            not known,
            -abs(share) if known else 0.0,
            s.get("group", 0),
            s.get("sample", 0),
        )

    return sorted(samples, key=rank)


# Where a non-finite part can enter, in the order AReaL's step computes: a NaN
# reward makes its whole group's advantages NaN (the group's mean and spread),
# so the reward is looked at in every sample before any advantage.
ENTRY_POINTS: tuple[tuple[str, Any], ...] = (
    ("reward", lambda s: s.get("reward_finite", True)),
    ("advantage", lambda s: s.get("advantage_finite", True)),
    ("engine log-prob", lambda s: s.get("engine_logp_finite", True)),
    ("trainer log-prob", lambda s: s.get("trainer_logp_finite", True)),
    ("loss", lambda s: _finite(s.get("loss"))),
    ("gradient", lambda s: _finite(s.get("grad_norm"))),
)


def step_is_finite(parts: dict[str, Any]) -> bool:
    """The step's loss and every mini-batch's gradient are finite."""
    return all(
        _finite(m.get("loss")) and _finite(m.get("grad_norm"))
        for m in parts["mini_batches"]
    )


def origin(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first sample whose own part is not finite and where it entered,
    traced back through the step's computation (``ENTRY_POINTS``), in the one
    numbering; None where every part is finite."""
    ordered = sorted(
        samples, key=lambda s: (s.get("group", 1 << 30), s.get("sample", 0))
    )
    for entered, finite in ENTRY_POINTS:
        for s in ordered:
            if not finite(s):
                return {
                    "group": s.get("group"),
                    "sample": s.get("sample"),
                    "entered": entered,
                    "key": s["key"],
                }
    return None
