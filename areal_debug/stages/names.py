# SPDX-License-Identifier: Apache-2.0
"""The stages of a PPO step by name (no torch: reports and configs read these)."""

# The order a PPO step runs its stages in; "stats" are the committed statistics.
STAGES = (
    "logp",
    "ref_logp",
    "values",
    "advantages",
    "loss",
    "grads",
    "weights",
    "stats",
)
# Per-token stages whose full tensors may be stored (debug.record_stage_tensors).
TOKEN_STAGES = ("logp", "ref_logp", "values", "advantages")
# Stages whose digests are summed over data-parallel ranks (one global value per
# parameter); the others are per rank (each rank's own trajectories and micro-batches).
GLOBAL_STAGES = ("grads", "weights")
