# SPDX-License-Identifier: Apache-2.0
"""The one output form of every benchmark figure.

A figure measured by repetition (a time, a ratio of times)::

    NAME: VALUE (median of N, range LO to HI; target OP TARGET) ok|MISS

VALUE is the median of N repetitions, each one paired measurement: the baseline
and the candidate run back to back in the same repetition, in alternating order
(``paired``), so that a slow phase of the machine falls on both and a drift over
the run cancels; warm-up repetitions are run and dropped (``repeat``). LO to HI
is the range of the N. ok/MISS judges the median.

A figure that is a whole over several steps (a total time over a total time,
where every step counts, the first one too)::

    NAME: VALUE (total of N, per-step LO to HI; target OP TARGET) ok|MISS

A figure that does not vary from run to run (a size, a count, a yes/no) is
measured once::

    NAME: VALUE (target OP TARGET) ok|MISS

A figure that decides a default (a cost that turns a setting on where it is
small enough) is a fact with its decision, not a target to miss::

    NAME: VALUE (median of N, range LO to HI; SETTING is ON at OP TARGET) decides: CHOICE

A figure that could not be measured here says so, and why, instead of
vanishing::

    NAME: n/a (WHY) SKIP

Lines starting with ``#`` are context. A script reads the figures with
``grep -E '^[][a-z_0-9]+: '``: the name is before the first ``: ``, the value
is the next field, the verdict the last. Each benchmark prints its figures with
``emit`` and exits with ``exit_status()``: non-zero when it printed a MISS or a
SKIP, so that ``make bench`` fails on either (it runs every script first, so
one failing figure hides none of the others).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
U = TypeVar("U")


def _ok(value: float, op: str, target: float) -> str:
    ok = value <= target if op == "<=" else value >= target
    return "ok" if ok else "MISS"


# The figures printed so far that fail ``make bench``: a MISS or a SKIP.
_failed: list[str] = []


def emit(line: str) -> None:
    """Print a figure line, remembering it if it failed (MISS or SKIP)."""
    print(line, flush=True)
    if line.endswith((" MISS", " SKIP")):
        _failed.append(line)


def exit_status() -> int:
    """The script's exit status: 1 when any figure it emitted failed."""
    return 1 if _failed else 0


def skipped(name: str, why: str) -> str:
    """A figure that could not be measured here, with the reason."""
    return f"{name}: n/a ({why}) SKIP"


def figure(name: str, value: float, op: str, target: float) -> str:
    """A figure measured once (a size, a count, a yes/no)."""
    return f"{name}: {value:.4g} (target {op} {target}) {_ok(value, op, target)}"


def median_figure(name: str, values: list[float], op: str, target: float) -> str:
    """A figure measured by repetition: the median of ``values``, with their range."""
    value = statistics.median(values)
    return (
        f"{name}: {value:.4g} (median of {len(values)}, range "
        f"{min(values):.4g} to {max(values):.4g}; target {op} {target}) "
        f"{_ok(value, op, target)}"
    )


def deciding_figure(
    name: str, values: list[float], op: str, target: float, setting: str,
    held: str, missed: str,
) -> str:  # fmt: skip
    """A figure that decides ``setting``'s default: the median of ``values``,
    and the choice it makes (``held`` where it is within ``op target``, else
    ``missed``). It never fails ``make bench``: either side is a decision."""
    value = statistics.median(values)
    chosen = held if _ok(value, op, target) == "ok" else missed
    return (
        f"{name}: {value:.4g} (median of {len(values)}, range {min(values):.4g} "
        f"to {max(values):.4g}; {setting} is {held} at {op} {target}) decides: {chosen}"
    )


def pooled_figure(
    name: str, parts: list[float], wholes: list[float], op: str, target: float
) -> str:
    """A whole over several steps: ``sum(parts) / sum(wholes)``, every step
    counted, with the range of the per-step ratios."""
    ratios = [p / w for p, w in zip(parts, wholes, strict=True)]
    value = sum(parts) / sum(wholes)
    return (
        f"{name}: {value:.4g} (total of {len(parts)}, per-step {min(ratios):.4g} "
        f"to {max(ratios):.4g}; target {op} {target}) {_ok(value, op, target)}"
    )


def repeat(measure: Callable[[int], T], runs: int, warmup: int = 1) -> list[T]:
    """``measure(i)`` for ``warmup + runs`` repetitions; the first ``warmup``
    results (imports, caches, allocators, a process starting) are dropped. ``i``
    counts from 0 over all of them: ``paired(i, ...)`` alternates on it."""
    out = [measure(i) for i in range(warmup + runs)]
    return out[warmup:]


def paired(
    i: int, baseline: Callable[[], T], candidate: Callable[[], U]
) -> tuple[T, U]:
    """``(baseline(), candidate())``, run back to back: the baseline first when
    ``i`` is even, the candidate first when it is odd."""
    if i % 2 == 0:
        b = baseline()
        return b, candidate()
    c = candidate()
    return baseline(), c
