# SPDX-License-Identifier: Apache-2.0
"""The README's commands as a user types them after ``make demo``: its code blocks
(bash, and console lines after ``$``) and the commands of "Looking inside a
recording", in the README's order, with what each is expected to print."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"

# Lines a test cannot run as printed, and why: each is run in another form.
NOT_RUN = {
    "make demo": "the demo the test ran (`areal-debug demo`, what make demo runs "
    "after the set-up the test runs in)",
    "python -m pip install": "an install (make test installs nothing)",
    "python -m areal_debug.launcher.local train.py": "the user's own script and "
    "config (the demo's run_replay.sh is its form here)",
    "python train.py": "the user's own script and config",
}
# Commands of "Looking inside a recording" left to their own tests: each runs
# replays (selfcheck, bisect: tests/test_selfcheck.py, tests/test_bisect.py) or
# is the demo itself.
LEFT_TO_THEIR_TESTS = (
    "areal-debug selfcheck",
    "areal-debug bisect",
    "areal-debug demo",
)


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """``(language, lines)`` of each fenced block."""
    return [
        (lang, body.splitlines())
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)
    ]


def commands(text: str) -> list[str]:
    """Every shell command of the README's bash and console blocks, in order
    (continuation lines joined; a console block's output lines left out), and
    after the block that opens "Looking inside a recording", the commands its
    list names."""
    out: list[str] = []
    looking = text.index("## Looking inside a recording")
    listed = [
        c
        for c in re.findall(r"^- \[`(areal-debug [^`]+)`\]", text[looking:], re.M)
        if not c.startswith(LEFT_TO_THEIR_TESTS)
    ]
    for lang, lines in code_blocks(text):
        if lang not in ("bash", "console"):
            continue
        joined: list[str] = []
        for line in lines:
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + line.strip()
            elif line.strip():
                joined.append(line.strip())
        out += joined
        if "source .venv/bin/activate" in lines[0]:
            out += listed
    return out


def runnable(command: str) -> bool:
    return not command.startswith(tuple(NOT_RUN))
