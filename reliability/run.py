# SPDX-License-Identifier: Apache-2.0
"""Run the reliability suite and print its table (``make reliability``).

    python -m reliability.run                 # every family, full size
    python -m reliability.run --cases 40 --chains 1   # a quick pass
    python -m reliability.run --only hostile-names    # one family

Exits 1 if any case was not handled; each failure is printed in full.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

from reliability import concurrent, crash, full_disk, hostile, hostile_names, read_only
from reliability.tally import Tally, table


@contextlib.contextmanager
def _output_to(path: str):
    """Send this process's stdout and stderr (file descriptors: AReaL's log
    handlers hold the streams) to ``path``: each case's log lines would drown
    the table."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


# Each family, run in a directory of its own with the command line's sizes.
FAMILIES = {
    "hostile": lambda d, a: hostile.run(d, a.cases, a.seed),
    "crash": lambda d, a: crash.run(d, a.chains, 4, a.seed),
    "full-disk": lambda d, a: [full_disk.run(d, a.chains, a.seed)],
    "read-only": lambda d, a: [read_only.run(d, a.chains, a.seed)],
    "concurrent": lambda d, a: concurrent.run(d, a.cases // 5),
    # Each case extracts, writes a script and (the first few) a page: 1/10 as many.
    "hostile-names": lambda d, a: hostile_names.run(d, max(1, a.cases // 10), a.seed),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=500, help="generated cases per family")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    ap.add_argument(
        "--chains", type=int, default=10, help="crash chains (4 kills each)"
    )
    ap.add_argument(
        "--only",
        choices=sorted(FAMILIES),
        action="append",
        help="run only these families (repeatable); default: every one",
    )
    args = ap.parse_args(argv)
    chosen = set(args.only or FAMILIES)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.monotonic()
    tallies: list[Tally] = []
    with (
        tempfile.TemporaryDirectory(prefix="areal-debug-reliability-") as root,
        _output_to(log := f"{root}.log"),
    ):
        for name, family in FAMILIES.items():
            if name in chosen:
                tallies += family(os.path.join(root, name), args)
    print(table(tallies))
    print(
        f"({time.monotonic() - t0:.0f} s, seed {args.seed}; what the cases logged: {log})"
    )
    return 0 if all(t.all_handled for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
