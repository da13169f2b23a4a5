# SPDX-License-Identifier: Apache-2.0
"""How long until step N of a long run is back: from a kept checkpoint, against
replaying every step before it.

A real AReaL run of the demo's task (``areal-debug demo``'s example script and
CPU server) at ``end_to_end.py``'s size (steps of seconds: with the demo's
millisecond steps, start-up would be all there is to measure) records 60 steps with AReaL's recover
checkpoint every 10 steps, kept with the recording (``recover.mode=on
++recover.freq_steps=10``). Step 50 is then brought back twice, each time by the
demo's ``run_replay.sh`` (no inference server), in a fresh process, wall time
from start to exit: ``debug.replay_start_step=50`` (AReaL's checkpoint of step 49
restored, one step trained) and ``debug.replay_end_step=50`` (from step 0). The
two replays alternate over the repetitions; the figure is the median of the
per-repetition ratios.

Target 0.5: the kept checkpoint at least halves the wait for a step 50 steps
into a run, start-up included, which it cannot skip. On a GPU cluster start-up
(loading the model, process groups) takes minutes and a step about a minute, so
the checkpoint saves far more (at most 10 steps replayed instead of 50); on this
CPU start-up takes about as long as 25 of these replay steps, so most of the
wait is start-up either way, and the bar is set for that case.

    .venv/bin/python benchmarks/step_n.py [--repeats 2] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_run import run_logged  # noqa: E402
from end_to_end import SIZE, build_model  # noqa: E402
from figures import emit, exit_status, median_figure, paired, repeat  # noqa: E402

from areal_debug.testing import end_process, run_env  # noqa: E402
from areal_debug.tooling.demo import (  # noqa: E402
    mode_command,
    script_env,
    start_server,
    write_replay_script,
)
from areal_debug.tooling.tiny_task import write_dataset  # noqa: E402

STEPS, STEP_N, EVERY = 60, 50, 10
KEEP = (*SIZE, "recover.mode=on", f"++recover.freq_steps={EVERY}")


def record(wd: Path) -> Path:
    """The 60-step recording; the replay script the demo writes for it."""
    build_model(wd / "model")
    write_dataset(str(wd / "data.jsonl"), n=16 * (STEPS + 1))
    server, addr = start_server(wd, run_env(wd))
    try:
        cmd = mode_command("dump", 1, STEPS, False, KEEP)
        run_logged(wd, "dump", cmd, run_env(wd, server_addr=addr))
    finally:
        end_process(server)
    return write_replay_script(wd, 1, STEPS, False, KEEP)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wd = Path(args.workdir or tmp).resolve()
        wd.mkdir(parents=True, exist_ok=True)
        script = record(wd)
        count = itertools.count()

        def replay(*overrides: str) -> float:
            name = f"replay{next(count)}"
            extra = [*overrides, f"debug.replay_trial_name={name}"]
            return run_logged(wd, name, ["bash", str(script), *extra], script_env())

        times = repeat(
            lambda i: paired(
                i,
                lambda: replay(f"debug.replay_end_step={STEP_N}"),
                lambda: replay(
                    f"debug.replay_start_step={STEP_N}",
                    f"debug.replay_end_step={STEP_N}",
                ),
            ),
            args.repeats,
            warmup=0,
        )
    for from_zero, from_kept in times:
        print(
            f"# step {STEP_N} back in {from_kept:.1f} s from the checkpoint of step "
            f"{STEP_N - 1}, {from_zero:.1f} s replaying steps 0-{STEP_N}"
        )
    emit(
        median_figure(
            f"seconds_to_step_n[{STEP_N}_of_{STEPS}]_vs_replay_from_step_0",
            [kept / zero for zero, kept in times],
            "<=",
            0.5,
        )
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
