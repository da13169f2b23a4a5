# SPDX-License-Identifier: Apache-2.0
"""Pre-flight: what a replay or resume command would meet, before it starts
(``areal-debug doctor``): config changes, missing steps, checkpoints, topology,
determinism and the silent configurations."""
