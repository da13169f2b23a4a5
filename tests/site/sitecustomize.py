# SPDX-License-Identifier: Apache-2.0
"""Loaded by the Python processes the test suite starts (``tests/conftest.py`` puts
this directory on ``PYTHONPATH``): AReaL's trainers, its RPC workers, the writer
process, the CPU server. The suite starts about 150 processes that load AReaL, on
2 cores, and is CPU-bound: three changes to Python's garbage collector, below.

Not in the processes of a test marked ``production_gc``: the signal, crash and
process-hygiene tests (``tests/conftest.py`` takes this directory off
``PYTHONPATH`` while they run). Their subject is how a process ends (a signal
handled, a kill survived, nothing left in the process table), and a process's
end is what the second change alters: those tests run with Python's own
collector, as production does.

For every other test the changes are safe: its subject is not process shutdown
or signals, and the collector changes only when garbage in reference cycles is
freed, never what a process computes, records or replays.

While a process starts, ``import areal`` creates hundreds of thousands of objects
that live for the whole run, and the collector's default thresholds (700, 10, 10)
make it scan them again and again: about 1 s of CPU of the 8-9 s the import
takes (``python -c "import areal.trainer.rl_trainer"``, user+sys, 5 runs each:
9.5 s with the defaults, 8.4 s with the thresholds below, 8.0 s with no
collector at all). The youngest generation is still collected, every 100k
allocations: a test process leaves its older cyclic garbage to the end of a run
of a few steps.

At exit, after every ``atexit`` handler has run (this one is registered first, so it
runs last: logging is shut down, recordings are flushed and closed), the objects
still alive are moved out of the collector's reach. Python's finalization
otherwise runs full collections over all of them: 1.5 s of CPU for a trainer that
has just finished and more than the 3 s AReaL's scheduler gives an RPC worker to
end before it kills it.

An explicit ``gc.collect()`` collects the youngest generation only. AReaL calls it
in ``FSDPEngine.destroy`` (twice, to free accelerator memory) and torch's dynamo
before each compilation (AReaL compiles its log-prob gather): each a full scan of
the objects the imports left. A one-process replay of the suite's spmd_d1
recording (tests/scripts/train_fake_engine.py, three alternating pairs): 20.4,
20.8, 20.9 CPU-s with full collections; 18.5, 18.6, 19.5 without. Nothing the
suite checks depends on when a cycle's memory is returned.
"""

import atexit
import gc

# The interpreter's own, for a production_gc test run inside a process started
# with this file (a pytest-xdist worker): tests/conftest.py restores them.
DEFAULT_THRESHOLD = gc.get_threshold()

# The interpreter's own, restored there too.
FULL_COLLECT = gc.collect


def _collect_youngest(generation: int = 2) -> int:
    return FULL_COLLECT(0)


gc.set_threshold(100_000, 1000, 1000)
gc.collect = _collect_youngest
atexit.register(gc.freeze)
