# SPDX-License-Identifier: Apache-2.0
"""Configurations that run without an error and still break what a replay or its
mismatch view can show (facts and sources in docs/gpu.md):

- ``attn_impl`` sdpa or eager on AReaL's FSDP engine with micro-batches that pack
  several sequences: each sequence after the first attends to those before it
  (AReaL #1442), so the trainer's log-probs are wrong, bit for bit repeatably;
- AReaL's Megatron or Archon deterministic mode: ``warn_only=True``, which keeps
  PyTorch's nondeterministic attention backward;
- flash attention on a GPU without ``FLASH_ATTENTION_DETERMINISTIC=1``: flash-attn's
  backward is nondeterministic and ``torch.use_deterministic_algorithms`` does not
  reach it.
"""

from __future__ import annotations

from typing import Any

from areal_debug.inspect.preflight.findings import INFO, WARNING, Finding
from areal_debug.recording.reader import RecordingReader

# Attention backends that read packed sequences' boundaries only from a mask
# AReaL's FSDP engine does not pass (it passes cu_seq_lens with the mask None).
PACKING_BLIND_ATTN = ("sdpa", "eager")
# Engines whose own deterministic mode asks for warn_only (config sections).
WARN_ONLY_ENGINES = ("megatron", "archon")
TRAINING_ROLES = ("actor", "critic", "ref")
FLASH_ENV = "FLASH_ATTENTION_DETERMINISTIC"


def silent_configurations(
    reader: RecordingReader, current: dict[str, Any], env: dict[str, str]
) -> list[Finding]:
    """Each known silent configuration of the command's config ``current`` (a
    plain dict) run with environment ``env``, against the recording."""
    deterministic = bool((current.get("debug") or {}).get("deterministic"))
    out = packed_attention(reader, current)
    out += _warn_only(current, deterministic)
    out += _flash_attention(reader, current, env, deterministic)
    return out


def _train_backend(config: dict[str, Any]) -> str:
    actor = config.get("actor") or {}
    return f"{config.get('allocation_mode') or ''} {actor.get('backend') or ''}"


def _recorded_lengths(reader: RecordingReader, stat: str) -> list[int]:
    lengths = []
    for step in reader.available_steps():
        stats = reader.recorded_stats(step) or {}
        if stat in stats:
            lengths.append(int(stats[stat]))
    return lengths


def shortest_recorded_sequence(reader: RecordingReader) -> int | None:
    """The shortest trajectory (tokens) over the recorded steps' statistics."""
    lengths = _recorded_lengths(reader, "ppo_actor/seq_len/min")
    return min(lengths) if lengths else None


def one_sequence_budget(reader: RecordingReader, shortest: int | None) -> int | None:
    """A ``max_tokens_per_mb`` that holds one sequence per micro-batch, given the
    shortest recorded sequence: the longest recorded one (what the README says),
    where two of the shortest do not fit in it; else just under twice the shortest."""
    if shortest is None:
        return None
    longest = _recorded_lengths(reader, "ppo_actor/seq_len/max")
    if longest and max(longest) < 2 * shortest:
        return max(longest)
    return 2 * shortest - 1


def _packs(mb_spec: dict[str, Any], shortest: int | None) -> bool:
    """Whether a micro-batch can hold two sequences: unless its token budget is
    below twice the shortest recorded sequence, it can."""
    budget = mb_spec.get("max_tokens_per_mb")
    return not (budget is not None and shortest is not None and budget < 2 * shortest)


def packed_attention(reader: RecordingReader, config: dict) -> list[Finding]:
    """The packing finding of ``config`` (a run's or a command's) against the
    recording: doctor's, and the report page's note on the recorded run."""
    actor = config.get("actor") or {}
    attn = actor.get("attn_impl")
    backend = _train_backend(config)
    if attn not in PACKING_BLIND_ATTN or any(e in backend for e in WARN_ONLY_ENGINES):
        return []
    mb_spec = actor.get("mb_spec") or {}
    shortest = shortest_recorded_sequence(reader)
    if not _packs(mb_spec, shortest):
        return []
    budget = one_sequence_budget(reader, shortest)
    one_per_mb = f"actor.mb_spec.max_tokens_per_mb={budget}" if budget else None
    return [
        Finding(
            WARNING,
            f"actor.attn_impl={attn} with micro-batches that pack several sequences "
            f"(max_tokens_per_mb={mb_spec.get('max_tokens_per_mb')}"
            + (f", shortest recorded sequence {shortest} tokens)" if shortest else ")"),
            "AReaL's FSDP engine packs a micro-batch into one row and gives "
            f"transformers' {attn} attention no mask that separates the sequences, so "
            "each one after the first attends to those before it (AReaL #1442): the "
            "trainer's log-probs are off by up to tenths of a nat, and the "
            "training-inference mismatch shown is the trainer's own making. A replay "
            "repeats it bit for bit",
            "on a GPU use actor.attn_impl=flash_attention_2; to see the gap without it, "
            "replay with one sequence per micro-batch"
            + (f" ({one_per_mb})" if one_per_mb else ""),
        )
    ]


def _warn_only(config: dict, deterministic: bool) -> list[Finding]:
    out = []
    for role in TRAINING_ROLES:
        section = config.get(role) or {}
        for engine in WARN_ONLY_ENGINES:
            if not (section.get(engine) or {}).get("use_deterministic_algorithms"):
                continue
            key = f"{role}.{engine}.use_deterministic_algorithms"
            why = (
                f"AReaL's {engine} engine then calls torch.use_deterministic_algorithms("
                "True, warn_only=True) at start, under which PyTorch keeps its "
                "nondeterministic flash and memory-efficient attention backward (it "
                "only warns)"
            )
            if deterministic:
                out.append(
                    Finding(
                        INFO,
                        f"{key}=true asks for warn_only deterministic algorithms",
                        why + "; debug.deterministic keeps them strict and records "
                        "where warn_only was asked for",
                        "nothing to do",
                    )
                )
            else:
                out.append(
                    Finding(
                        WARNING,
                        f"{key}=true without debug.deterministic",
                        why + ", so its gradients are not repeatable",
                        "set debug.deterministic=true",
                    )
                )
    return out


def _flash_attention(
    reader: RecordingReader, config: dict, env: dict[str, str], deterministic: bool
) -> list[Finding]:
    attn = str((config.get("actor") or {}).get("attn_impl") or "")
    if not attn.startswith("flash_attention"):
        return []
    out = []
    recorded = reader.manifest.determinism
    if recorded and recorded.get(FLASH_ENV) != "1":
        out.append(
            Finding(
                WARNING,
                f"the dump run used {attn} without {FLASH_ENV}=1",
                "flash-attn's backward was then nondeterministic: the recorded "
                "gradients, losses after the first update and weights cannot be "
                "repeated bit for bit by any replay",
                f"record with debug.deterministic=true (it sets {FLASH_ENV}=1)",
            )
        )
    if not deterministic and env.get(FLASH_ENV) != "1":
        out.append(
            Finding(
                WARNING,
                f"actor.attn_impl={attn} without {FLASH_ENV}=1",
                "transformers asks flash-attn for its deterministic backward only when "
                f"{FLASH_ENV}=1; torch.use_deterministic_algorithms does not reach it, "
                "so on a GPU each run's gradients can differ",
                f"set debug.deterministic=true (it sets {FLASH_ENV}=1) or export "
                f"{FLASH_ENV}=1",
            )
        )
    return out
