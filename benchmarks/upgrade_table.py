# SPDX-License-Identifier: Apache-2.0
"""The upgrade table: the CPU demo recorded under each AReaL build and replayed
under each (issue 67, part 3). Each row is the build that recorded, each column
the build that replayed: ``bit for bit`` or the first stage the replay leaves
the recording at, with the story's line naming both builds.

    python benchmarks/upgrade_table.py --workdir /tmp/upgrade \\
        --build 1.0.4=.venv --build 2.0.0=.venv-a2 --build main=.venv-main

Every build's venv holds areal-debug (``make setup AREAL=... VENV=...``); each
recording is made once, by that venv's ``areal-debug demo``, whose own replay is
the diagonal; the others replay it with the demo's replay command under their own
Python (run_replay.sh's interpreter swapped, nothing else). ``--json`` prints
every cell; the markdown table goes to stdout otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from areal_debug.compare.report import ReplayReport

REPORT = Path("root/logs/root/tinydemo/trial0_replay/replay_report.json")


@dataclass
class Cell:
    recorded: str
    replayed: str
    verdict: str  # "bit for bit", or "moved at <stage>"
    first_divergence: dict | None
    areal_change: str | None
    headline: str
    seconds: float


def _run(cmd: list[str], log: Path, env: dict) -> None:
    with open(log, "w") as out:
        rc = subprocess.run(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT
        ).returncode
    if rc != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{shlex.join(cmd[:4])} ... failed ({rc}); {log}:\n{tail}")


def _cell(recorded: str, replayed: str, report: Path, seconds: float) -> Cell:
    """The verdict of one replay: ``bit for bit`` where every stage and every
    statistic both builds log are (a statistic one build alone logs is counted
    apart), else the first stage it leaves the recording at."""
    data = json.loads(report.read_text())
    first = data.get("first_divergence")
    statuses = [m.get("status") for s in data["steps"] for m in s["metrics"].values()]
    stages = [st.get("status") for s in data["steps"] for st in s["stages"].values()]
    # The statistics one build alone logs, as the replay's own headline counts them.
    only_recorded, only_replayed = ReplayReport.from_json(data).one_sided_metrics()
    one_sided = sorted({*only_recorded, *only_replayed})
    if (
        first is None
        and "differs" not in stages
        and not ({"diverged", "within_tolerance"} & set(statuses))
    ):
        verdict = "bit for bit"
        if one_sided:
            verdict += f" ({len(one_sided)} statistics one build alone logs)"
    else:
        where = first or {}
        verdict = f"moved at step {where.get('step')}, {where.get('stage')}"
        if where.get("where"):
            verdict += f" ({where['where']})"
    return Cell(
        recorded, replayed, verdict, first, data.get("areal_change"),
        data.get("headline", ""), round(seconds, 1),
    )  # fmt: skip


def _replay_command(run_replay: Path, recorded_python: str, python: str) -> list[str]:
    """The demo's replay command (the last line of run_replay.sh) under
    ``python``: nothing else changes."""
    line = run_replay.read_text().strip().splitlines()[-1]
    argv = shlex.split(line)
    assert argv[0] == "exec", line
    argv = [a for a in argv[1:] if a != "$@"]  # the script's own arguments: none
    assert recorded_python in argv, (recorded_python, line)
    return [python if a == recorded_python else a for a in argv]


def measure(
    builds: dict[str, Path], workdir: Path, steps: int, reuse: bool = False
) -> list[Cell]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    cells = []
    for name, venv in builds.items():
        wd = workdir / f"recorded-{name}"
        t0 = time.monotonic()
        if not (reuse and (wd / REPORT).is_file()):
            print(
                f"recording the demo under AReaL {name} ({venv}) ...", file=sys.stderr
            )
            _run(
                [str(venv / "bin" / "areal-debug"), "demo", "--workdir", str(wd),
                 "--steps", str(steps)],
                workdir / f"demo-{name}.log", env,
            )  # fmt: skip
        cells.append(_cell(name, name, wd / REPORT, time.monotonic() - t0))
        for other, other_venv in builds.items():
            if other == name:
                continue
            print(f"  replaying it under AReaL {other} ...", file=sys.stderr)
            copy = workdir / f"report-{name}-under-{other}.json"
            cmd = _replay_command(
                wd / "run_replay.sh",
                str(venv / "bin" / "python"),
                str(other_venv / "bin" / "python"),
            )
            t0 = time.monotonic()
            _run(
                cmd,
                workdir / f"replay-{name}-under-{other}.log",
                {**env, "AREAL_DEBUG_REPORT_COPY": str(copy)},
            )
            cells.append(_cell(name, other, copy, time.monotonic() - t0))
    return cells


def table(cells: list[Cell], builds: list[str]) -> str:
    by = {(c.recorded, c.replayed): c for c in cells}
    lines = [
        "| recorded under \\ replayed under | " + " | ".join(builds) + " |",
        "|---" * (len(builds) + 1) + "|",
    ]
    for row in builds:
        lines.append(
            f"| {row} | " + " | ".join(by[row, col].verdict for col in builds) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--build", action="append", required=True, metavar="NAME=VENV",
        help="an AReaL build and the venv it is installed in (repeat)",
    )  # fmt: skip
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--reuse", action="store_true",
        help="a build's demo already run in --workdir is not run again",
    )  # fmt: skip
    args = ap.parse_args(argv)
    builds = {}
    for spec in args.build:
        name, _, venv = spec.partition("=")
        builds[name] = Path(venv).resolve()
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cells = measure(builds, workdir, args.steps, args.reuse)
    if args.json:
        print(json.dumps([asdict(c) for c in cells], indent=2))
    else:
        print(table(cells, list(builds)))
        for c in cells:
            print(f"- recorded {c.recorded}, replayed {c.replayed}: {c.headline}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
