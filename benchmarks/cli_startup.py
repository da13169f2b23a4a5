# SPDX-License-Identifier: Apache-2.0
"""How long the ``areal-debug`` command takes to answer, against its targets.

Each command runs as a user types it (a fresh interpreter), several times after
a warm-up run that is dropped (it fills the page cache and writes bytecode); the
figure is the median wall time, with its range. ``--help`` and ``ls`` read no
payload, so they must import neither AReaL nor torch; ``show`` loads a payload,
so torch's own import time is subtracted from it: each repetition times ``show``
and ``python -c "import torch"`` back to back, in alternating order, and the
figure is the median of those differences.

    python benchmarks/cli_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from figures import emit, exit_status, median_figure, paired, repeat

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "recording-v1")
CLI = [sys.executable, "-m", "areal_debug.cli"]


def seconds(cmd: list[str]) -> float:
    """``cmd``'s wall time, run once."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        recording = os.path.join(root, "tiny", "t0", "areal_debug_recording")
        shutil.copytree(FIXTURE, recording)
        help_s = repeat(lambda _: seconds([*CLI, "--help"]), args.runs)
        ls_s = repeat(lambda _: seconds([*CLI, "ls", root]), args.runs)
        show = [*CLI, "show", recording, "--step", "0"]
        torch_import = [sys.executable, "-c", "import torch"]
        pairs = repeat(
            lambda i: paired(i, lambda: seconds(torch_import), lambda: seconds(show)),
            args.runs,
        )
    torch_s = [t for t, _ in pairs]
    show_s = [s for _, s in pairs]
    print(f"# {args.runs} runs each after a dropped warm-up run")
    print(
        f"# import torch alone: {statistics.median(torch_s):.3f} s "
        f"(range {min(torch_s):.3f}-{max(torch_s):.3f})"
    )
    print(
        f"# show: {statistics.median(show_s):.3f} s "
        f"(range {min(show_s):.3f}-{max(show_s):.3f})"
    )
    emit(median_figure("cli_help_seconds", help_s, "<=", 0.5))
    emit(median_figure("cli_ls_seconds", ls_s, "<=", 1.0))
    emit(
        median_figure(
            "cli_show_seconds_minus_torch_import",
            [s - t for t, s in pairs],
            "<=",
            1.0,
        )
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
