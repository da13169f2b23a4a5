# SPDX-License-Identifier: Apache-2.0
"""The on-disk recording: format, writer (thread and process), reader, manifest, lock, retention, kept checkpoints."""
