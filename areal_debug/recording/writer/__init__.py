# SPDX-License-Identifier: Apache-2.0
"""The recording's writer wing: what writes a recording while training runs.

A snapshot of each batch on the training thread (``snapshot``), typed jobs on a
bounded queue (``jobs``) taken by the writer thread (``recording_writer``), each
job's files (``step_files``) and the stop marker when a write fails
(``stop_marker``); payloads stored by the writer process (``process/``) or the
writer thread (``router``, ``payload_file``). A recording is started or
continued by ``start``. The store it writes (``recording/``) never imports it.
"""
