# SPDX-License-Identifier: Apache-2.0
"""How long the ``areal-debug`` command takes to answer, against its targets.

Each command runs as a user types it (a fresh interpreter), several times; the
figure is the median wall time. ``--help`` and ``ls`` read no payload, so they must
import neither AReaL nor torch; ``show`` loads a payload, so torch's own import
time (measured the same way, in the same run) is subtracted from it.

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

from figures import figure

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "recording-v1")
CLI = [sys.executable, "-m", "areal_debug.cli"]


def seconds(cmd: list[str], runs: int) -> tuple[float, float]:
    """Median and spread (max - min) of ``cmd``'s wall time over ``runs`` runs."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times) - min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        recording = os.path.join(root, "tiny", "t0", "areal_debug_recording")
        shutil.copytree(FIXTURE, recording)
        help_s, help_spread = seconds([*CLI, "--help"], args.runs)
        ls_s, ls_spread = seconds([*CLI, "ls", root], args.runs)
        show_s, show_spread = seconds(
            [*CLI, "show", recording, "--step", "0"], args.runs
        )
        torch_s, torch_spread = seconds(
            [sys.executable, "-c", "import torch"], args.runs
        )
    print(f"# median of {args.runs} runs each; spread (max - min) in brackets")
    print(f"# import torch alone: {torch_s:.3f} s [{torch_spread:.3f}]")
    print(f"# show: {show_s:.3f} s [{show_spread:.3f}]")
    print(figure("cli_help_seconds", help_s, "<=", 0.5) + f" [{help_spread:.3f}]")
    print(figure("cli_ls_seconds", ls_s, "<=", 1.0) + f" [{ls_spread:.3f}]")
    print(
        figure("cli_show_seconds_minus_torch_import", show_s - torch_s, "<=", 1.0)
        + f" [{show_spread:.3f}]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
