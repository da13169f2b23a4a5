# SPDX-License-Identifier: Apache-2.0
"""Stage digests of a PPO step: digest, probes on the engines, comparison, recorded reference log-probs."""
