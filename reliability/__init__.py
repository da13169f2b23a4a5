# SPDX-License-Identifier: Apache-2.0
"""The reliability suite: the format's promises tried the way storage systems
test theirs (killed writers, hostile files, concurrent readers). ``make
reliability`` runs every family in full and prints the table; the test suite
runs a fixed-seed subset of each (tests/test_reliability.py)."""
