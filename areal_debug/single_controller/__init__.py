# SPDX-License-Identifier: Apache-2.0
"""Single-controller plumbing: RTensors, running servers, RPC workers (probed, deterministic, reaped)."""
