# SPDX-License-Identifier: Apache-2.0
"""The training settings a replay (or a command doctor checks) runs with that
differ from the dump run's: the first part of a replay's story, and what can
explain where it leaves the recording."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

# Config keys whose change makes a replay train differently from the dump run
# (intended when testing a change; a surprise otherwise).
TRAINING_KEYS = (
    "actor.path",
    "tokenizer_path",
    "seed",
    "gconfig",
    "actor.optimizer",
    "actor.mb_spec",
    "actor.ppo_n_minibatches",
    "actor.eps_clip",
    "actor.eps_clip_higher",
    "actor.c_clip",
    "actor.kl_ctl",
    "actor.kl_estimator",
    "actor.reward_norm",
    "actor.reward_scaling",
    "actor.reward_bias",
    "actor.reward_clip",
    "actor.adv_norm",
    "actor.discount",
    "actor.gae_lambda",
    "actor.recompute_logprob",
    "actor.use_decoupled_loss",
    "actor.behav_imp_weight_cap",
    "actor.rejection_sampling",
    "actor.dtype",
    # The micro-batch layout and kernels: on a GPU a row's result depends on the
    # batch shape (cuBLAS picks kernels by it) and on the attention backend.
    "actor.attn_impl",
    "actor.pad_to_maximum",
    "actor.logprobs_chunk_size",
    "actor.disable_dropout",
    "actor.gradient_checkpointing",
    "actor.max_new_tokens",
    "actor.mask_no_eos_with_zero",
    "actor.backend",
    "train_dataset.batch_size",
    "rollout.max_head_offpolicyness",
    "critic",
    "ref",
    "teacher",
    # AReaL after cbff54d: loss aggregation (#1546), the group members a batch
    # keeps (#1563), process-reward advantage shaping (advantage_shaping_mode,
    # gvpo_*), the adaptive tree layout and multi-objective distillation (#1592).
    "actor.loss_aggregation",
    "actor.min_usable_group_size",
    "actor.adaptive_tree",
    "rollout.agent.prm",
    "mopd",
    # A replay's what-if on the batch itself: the samples it leaves out.
    "debug.drop_samples",
)
# Keys that decide the shapes and kernels of the training forward: changed, even a
# step that trains the same weights on the same batch rounds differently on a GPU.
LAYOUT_KEYS = (
    "actor.mb_spec",
    "actor.pad_to_maximum",
    "actor.logprobs_chunk_size",
    "actor.attn_impl",
    "actor.dtype",
)
# Keys that decide how recorded batches are grouped: a change makes the replay
# meaningless, not merely different.
GROUPING_KEYS = ("gconfig.n_samples", "actor.reward_norm.group_size")

# Keys that act where the batch is made (prepare_batch's arguments: which groups
# and members survive, how rewards are normalised there): a replay trains the
# recorded batch, made with the recording's values, so a change does nothing.
ROLLOUT_SIDE_KEYS = (
    "gconfig.reward_normalization",
    "gconfig.reward_normalization_use_std",
    "gconfig.drop_incomplete_group",
    "actor.min_usable_group_size",
)

ABSENT = "<absent>"


def is_one_sided(recorded: Any, current: Any) -> bool:
    """A key only one side's config has: another AReaL build's (or config
    class's) setting, not a value anyone changed."""
    return ABSENT in (recorded, current)


@dataclass(frozen=True)
class ConfigChange:
    key: str
    recorded: Any
    current: Any

    @property
    def grouping(self) -> bool:
        return _under(self.key, GROUPING_KEYS)

    @property
    def layout(self) -> bool:
        return _under(self.key, LAYOUT_KEYS)

    @property
    def one_sided(self) -> bool:
        return is_one_sided(self.recorded, self.current)

    @property
    def rollout_side(self) -> bool:
        return _under(self.key, ROLLOUT_SIDE_KEYS)

    def describe(self) -> str:
        return f"{self.key} is {self.current!r}, the recording was made with {self.recorded!r}"

    def short(self) -> str:
        return f"{self.key} {self.recorded!r} -> {self.current!r}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "recorded": self.recorded, "replay": self.current}


def config_dict(config, debug) -> dict[str, Any]:
    """A run's config as the manifest keeps it (plain JSON values; a user's own
    config class carries the debug section outside its fields)."""
    whole = {"debug": dataclasses.asdict(debug), **dataclasses.asdict(config)}
    return json.loads(json.dumps(whole, default=str))


# areal-debug's own keys of TRAINING_KEYS: a recording made before one existed
# had its default (not another AReaL build's setting).
OWN_KEY_DEFAULTS = {"debug.drop_samples": ""}


def training_changes(recorded: dict, current: dict) -> list[ConfigChange]:
    """Training-relevant keys (TRAINING_KEYS, GROUPING_KEYS) whose value differs,
    by dotted key; a key one side lacks reads as ABSENT (areal-debug's own: its
    default)."""
    a = {**OWN_KEY_DEFAULTS, **_flatten(recorded)}
    b = {**OWN_KEY_DEFAULTS, **_flatten(current)}
    return [
        ConfigChange(key, a.get(key, ABSENT), b.get(key, ABSENT))
        for key in sorted(set(a) | set(b))
        if _under(key, TRAINING_KEYS + GROUPING_KEYS)
        and a.get(key, ABSENT) != b.get(key, ABSENT)
    ]


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _under(key: str, roots: tuple[str, ...]) -> bool:
    return any(key == r or key.startswith(r + ".") for r in roots)


def story_start(changes: list[ConfigChange]) -> str:
    """The replay's first line: what was changed from the recording."""
    only = [c for c in changes if c.one_sided]
    changes = [c for c in changes if not c.one_sided]
    # A key one config lacks is another AReaL build's setting (or a config class's):
    # named as such, each with the side that has it, never as a change of the user's.
    one_side = (
        (
            f" {len(only)} setting(s) only one side's AReaL (or config class) has: "
            + "; ".join(
                f"{c.key} {c.recorded!r} in the recording"
                if c.current == ABSENT
                else f"{c.key} {c.current!r} in this run"
                for c in only
            )
            + "."
        )
        if only
        else ""
    )
    if not changes:
        return (
            "Replay: the training settings are the recording's (a difference found "
            "below comes from code, versions or hardware, not the config)." + one_side
        )
    text = (
        f"Replay: you changed {len(changes)} training setting(s) from the recording: "
        + "; ".join(c.short() for c in changes)
        + ". The replay leaves the recording where they first take effect."
        + one_side
    )
    idle = [c.key for c in changes if c.rollout_side]
    if idle:
        text += (
            f" {', '.join(idle)} act{'s' if len(idle) == 1 else ''} where the batch "
            "is made (prepare_batch): the replay trains the recorded batch, made "
            "with the recording's value, so this change does nothing here; record "
            "with it to see its effect."
        )
    return text
