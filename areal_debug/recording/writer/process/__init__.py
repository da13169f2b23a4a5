# SPDX-License-Identifier: Apache-2.0
"""The writer process: payloads serialised, compressed, hashed, written and fsynced
outside the training process.

On a thread of the training process that work takes the GIL back dozens of times
a step, and each time a Python-heavy training loop waits. Here the recorder's
writer thread only packs a payload (``packed_payload``: one flat buffer per
dtype), copies the buffers once into shared memory (a memfd both processes map)
and waits for the reply with the GIL released. The writer process reads the
buffers in place, stores the payload atomically and describes it for the shard
metadata.

The process runs ``server`` as ``__main__`` (through a few fixed lines of boot
code, ``client.BOOT``), not multiprocessing's spawn (which would import the
user's training script again), and imports only torch and the recording's
modules it needs (none of the writer thread's side: ``make lint`` checks). It is
started once per training process and shared by its writers, one payload at a
time. It ends with its parent: when idle it reads end-of-file on its socket,
when busy it checks its parent between chunks and before the rename, so a killed
training run leaves no step behind it (at most a temporary file, which the next
run sweeps).

One module per side and per thing between them: ``client`` (the training
process's side: starting the writer process, handing it payloads), ``server``
(the writer process's loop), ``messages`` (the typed requests and replies),
``arena`` (the shared memory a payload crosses in) and ``memory`` (reading the
training process's memory, and Yama's permission for it).
"""
