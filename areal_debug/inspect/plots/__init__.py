# SPDX-License-Identifier: Apache-2.0
"""``areal-debug plot``: per-step statistics as a PNG, of one recorded run
(``one_run``) or of two runs set side by side (``two_runs``)."""
