# SPDX-License-Identifier: Apache-2.0
"""``areal-debug diff``: where two recordings, or two replays, first part ways
(``two_runs``), and its view (``render``)."""
