# SPDX-License-Identifier: Apache-2.0
"""Run the reliability suite and print its table (``make reliability``).

    python -m reliability.run                 # every family, full size
    python -m reliability.run --cases 40 --chains 1   # a quick pass

Exits 1 if any case was not handled; each failure is printed in full.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

from reliability import concurrent, crash, full_disk, hostile, read_only
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=500, help="generated cases per family")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    ap.add_argument(
        "--chains", type=int, default=10, help="crash chains (4 kills each)"
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.monotonic()
    tallies: list[Tally] = []
    with (
        tempfile.TemporaryDirectory(prefix="areal-debug-reliability-") as root,
        _output_to(log := f"{root}.log"),
    ):
        tallies += hostile.run(os.path.join(root, "hostile"), args.cases, args.seed)
        tallies += crash.run(os.path.join(root, "crash"), args.chains, 4, args.seed)
        tallies.append(
            full_disk.run(os.path.join(root, "full-disk"), args.chains, args.seed)
        )
        tallies.append(
            read_only.run(os.path.join(root, "read-only"), args.chains, args.seed)
        )
        tallies += concurrent.run(os.path.join(root, "concurrent"), args.cases // 5)
    print(table(tallies))
    print(
        f"({time.monotonic() - t0:.0f} s, seed {args.seed}; what the cases logged: {log})"
    )
    return 0 if all(t.all_handled for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
