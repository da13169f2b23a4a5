# SPDX-License-Identifier: Apache-2.0
"""Loaded by every Python process the test suite starts (``tests/conftest.py`` puts
this directory on ``PYTHONPATH``): AReaL's trainers, its RPC workers, the writer
process, the CPU server.

At exit, after every ``atexit`` handler has run (this one is registered first, so it
runs last: logging is shut down, recordings are flushed and closed), the objects
still alive are moved out of the garbage collector's reach. Python's finalization
otherwise runs full collections over all of them: with AReaL loaded that is
hundreds of thousands of objects, 1.5 s of CPU for a trainer that has just
finished and more than the 3 s AReaL's scheduler gives an RPC worker to end
before it kills it. The suite starts about 150 such processes on 2 cores. What
the tests check never happens there; only garbage in reference cycles is left to
the operating system instead of being collected.
"""

import atexit
import gc

atexit.register(gc.freeze)
