# SPDX-License-Identifier: Apache-2.0
"""What a replay compares with its recording, and the report it writes."""
