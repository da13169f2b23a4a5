# SPDX-License-Identifier: Apache-2.0
"""Stage digests of a PPO step: digest, probes on the engines, the record a rank
hands over, recorded reference log-probs; names and tensor keys."""
