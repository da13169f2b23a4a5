# SPDX-License-Identifier: Apache-2.0
"""``make bench-gpu`` on CPU: the script a lent GPU machine runs, kept working.

It runs the small shape here (a GPU run is ``benchmarks/gpu_step.py`` on a
machine with one). Its figures are not judged here (no timed assertion in a
test): each is printed, in the one figure form, and the exit status says
whether one missed its target.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_step.py"
FIGURE = re.compile(
    r"^(?P<name>[a-z_]+\[small\]): (?P<value>\S+) \(median of 1, range .*; "
    r"target <= (?P<target>\S+)\) (?P<verdict>ok|MISS)$"
)
# The layer digests' cost decides debug.layer_digests' default: a decision, never a
# MISS (either side of its line is a default).
DECIDING = re.compile(
    r"^(?P<name>[a-z_]+\[small\]): (?P<value>\S+) \(median of 1, range .*; "
    r"debug.layer_digests' default is true at <= (?P<target>\S+)\) "
    r"decides: (?P<verdict>true|pinned)$"
)
NAMES = (
    "gpu_stage_digests_vs_train_step[small]",
    "gpu_recorder_blocking_vs_train_step[small]",
    "gpu_writer_seconds_per_step_vs_train_step[small]",
    "gpu_layer_digests_vs_train_step[small]",
)


def test_bench_gpu_prints_every_figure_on_cpu():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--device", "cpu"],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = run.stdout.splitlines()
    figures = {m["name"]: m for m in map(FIGURE.match, lines) if m}
    deciding = {m["name"]: m for m in map(DECIDING.match, lines) if m}
    assert sorted([*figures, *deciding]) == sorted(NAMES), (
        run.stdout + run.stderr[-3000:]
    )
    (layers,) = deciding.values()
    assert layers["name"] == "gpu_layer_digests_vs_train_step[small]"
    assert (layers["verdict"] == "true") == (
        float(layers["value"]) <= float(layers["target"])
    )
    # The digests' read rate against the device's own copy, in all and by stage.
    rate = [line for line in lines if line.startswith("# the stage digests read ")]
    assert len(rate) == 1 and "of the device's copy rate" in rate[0], run.stdout
    assert all(f"{stage} " in rate[0] for stage in ("logp", "grads", "weights"))
    context = [line for line in lines if line.startswith("# CPU")]
    assert len(context) == 1 and "small, " in context[0], run.stdout
    for m in figures.values():
        value = float(m["value"])
        assert value > 0
        assert (m["verdict"] == "ok") == (value <= float(m["target"]))
    missed = any(m["verdict"] == "MISS" for m in figures.values())
    assert run.returncode == (1 if missed else 0), run.stderr[-3000:]
