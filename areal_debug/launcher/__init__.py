# SPDX-License-Identifier: Apache-2.0
"""Drop-in wrappers of AReaL's SPMD launchers that start no inference engine in replay mode."""
