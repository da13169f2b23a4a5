# SPDX-License-Identifier: Apache-2.0
"""The on-disk recording, a store with a writer wing.

The store (this package's modules): format, codecs, packed payloads, atomic files,
reader, schema, manifest, lock, retention, anomaly pins, kept checkpoints. What
writes a recording while training runs is its writer wing (``writer/``: the writer
thread, its jobs and files; ``writer/process/``: the writer process), which the
store never imports.
"""
