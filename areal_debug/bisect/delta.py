# SPDX-License-Identifier: Apache-2.0
"""Delta debugging (Zeller's ddmin) over a set of changes: the smallest subset
that still moves the step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def ddmin(
    changes: Sequence[T], moves: Callable[[tuple[T, ...]], bool]
) -> tuple[T, ...]:
    """A 1-minimal subset of ``changes`` for which ``moves`` is true (given that
    all of them move it). ``moves`` is asked once per subset."""
    seen: dict[tuple[T, ...], bool] = {}

    def test(subset: tuple[T, ...]) -> bool:
        if subset not in seen:
            seen[subset] = moves(subset)
        return seen[subset]

    current = tuple(changes)
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        for chunk in chunks:
            if test(chunk):
                current, n = chunk, 2
                break
        else:
            for i in range(len(chunks)):
                rest = tuple(c for j, ch in enumerate(chunks) if j != i for c in ch)
                if n > 2 and test(rest):
                    current, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(current):
                    break
                n = min(len(current), 2 * n)
    return current


def _split(items: tuple[T, ...], n: int) -> list[tuple[T, ...]]:
    size, rest = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < rest else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out
