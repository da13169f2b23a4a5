# SPDX-License-Identifier: Apache-2.0
"""What the inspection commands share: input errors, progress, finding things."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from areal_debug.compare.report import (
    REPORT_NAME,
    NotAReport,
    ReplayReport,
    read_report,
)
from areal_debug.logs import get_logger
from areal_debug.recording.format import MANIFEST, StepRanges

T = TypeVar("T")


# The inspection commands' logger: areal_debug.logs imports no AReaL.
logger = get_logger("DebugInspect")


class InspectError(ValueError):
    """Bad input to an inspection command (exit code 1): what, why, what to do."""


def first_line(e: BaseException) -> str:
    """The first line of an error's message (its repr if it has none): third-party
    errors (hydra, transformers) can run to pages."""
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)


class MissingPathError(InspectError):
    """A path given on the command line does not exist (exit code 2)."""


def require_path(path: str, what: str) -> str:
    """``path`` if it exists, else one clear error naming it."""
    if not os.path.exists(path):
        raise MissingPathError(
            f"{what} {path} does not exist. Check the path (a recording is the "
            f"directory holding {MANIFEST}; a replay report is {REPORT_NAME} in the "
            "replay trial's log directory)."
        )
    return path


def is_recording(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MANIFEST))


def report_file(path: str) -> str | None:
    """The replay report ``path`` names (the file, or a directory holding it)."""
    if os.path.isdir(path):
        candidate = os.path.join(path, REPORT_NAME)
        return candidate if os.path.isfile(candidate) else None
    if os.path.isfile(path) and path.endswith(".json"):
        return path
    return None


def replay_report_at(path: str) -> tuple[str, ReplayReport]:
    """(the file, the report) of the replay report ``path`` names: the file, or a
    replay trial's log directory holding it; one error saying what to give."""
    require_path(path, "The replay report")
    found = report_file(path)
    if found is None:
        raise InspectError(
            f"{path} is not a replay report: give the replay_report.json a replay "
            "wrote, or the replay trial's log directory holding it (areal-debug ls "
            "ROOT names each replay of a recording)."
        )
    return found, load_report(found)


def load_report(path: str) -> ReplayReport:
    """A replay report (compare/report.py read_report), or one error saying why
    it is not one (RecordingError: unreadable; InspectError: not a report)."""
    try:
        return read_report(path)
    except NotAReport as e:
        raise InspectError(str(e)) from None


def parse_steps(text: str | None, what: str = "--steps") -> StepRanges | None:
    """A ``--steps`` option in the grammar of ``debug.record_steps`` (``0-9,50,100-``):
    None for every step, else what ``in`` tests a step against."""
    try:
        return StepRanges.parse(text, f"{what} ")
    except ValueError as e:
        raise InspectError(str(e)) from None


def parse_int_list(text: str | None, what: str) -> list[int] | None:
    """'0,3,5-7' -> [0, 3, 5, 6, 7]; None stays None."""
    if text is None:
        return None
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise InspectError(
                f"{what} {text!r}: {part!r} is not a number or a range like 5-7."
            ) from None
    if any(i < 0 for i in out):
        raise InspectError(f"{what} {text!r}: numbers must be >= 0.")
    return sorted(set(out))


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested) as plain JSON values: their own ``to_json`` where they
    have one (it may add what is derived, such as a trajectory's page link)."""
    to_json = getattr(obj, "to_json", None)
    if callable(to_json) and not isinstance(obj, type):
        return to_jsonable(to_json())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Field by field (not dataclasses.asdict, which would turn a nested one
        # into a dict before its own to_json is asked).
        return {
            f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
        }
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


def override_word(key: str, value: Any) -> str:
    """``key=value`` as one shell word for a person to paste into a command line
    (the value as a config override writes it): recorded text, quotes, ``$(...)``
    and newlines included, it arrives as it is."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif value is None:
        text = "null"
    else:
        text = str(value)
    return shlex.quote(f"{key}={text}")


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None if not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def track(
    items: Iterable[T], description: str, total: int | None = None
) -> Iterator[T]:
    """``items``, with a progress bar while stdout is a terminal; quiet otherwise.

    Drawn on stderr and cleared when done, so nothing of it reaches the output.
    """
    if not interactive():
        yield from items
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


def interactive() -> bool:
    """Whether a person watches: stdout (and stderr, where bars go) are terminals."""
    return sys.stdout.isatty() and sys.stderr.isatty()


@contextlib.contextmanager
def status(description: str) -> Iterator[None]:
    """A spinner (on stderr) while a single long step runs, at a terminal only."""
    if not interactive():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(description):
        yield


def _on_path_here(name: str) -> bool:
    """Whether ``name`` on PATH is the one beside this interpreter (compared as
    paths, not resolved: a venv's python links to the base interpreter)."""
    import shutil
    from pathlib import Path

    found = shutil.which(name)
    return found is not None and Path(found).absolute().parent == (
        Path(sys.executable).absolute().parent
    )


def cli_command() -> str:
    """``areal-debug`` as a person can type it in the shell this ran from: the bare
    name where PATH finds this installation's, else its path beside this Python (a
    venv not activated), else ``PYTHON -m areal_debug.cli``."""
    from pathlib import Path

    if _on_path_here("areal-debug"):
        return "areal-debug"
    beside = Path(sys.executable).absolute().parent / "areal-debug"
    if beside.exists():
        return shlex.quote(str(beside))
    return f"{shlex.quote(sys.executable)} -m areal_debug.cli"


def python_command() -> str:
    """This interpreter as a shell word: ``python`` where PATH finds it, else its
    path (the one that has areal-debug and what its reproducers import)."""
    return "python" if _on_path_here("python") else shlex.quote(sys.executable)
