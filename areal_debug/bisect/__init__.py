# SPDX-License-Identifier: Apache-2.0
"""What moved step N: replays of one recorded step as the oracle of a bisect over
settings (delta debugging) or, for ``git bisect run``, over anything else."""
