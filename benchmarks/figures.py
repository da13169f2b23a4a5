# SPDX-License-Identifier: Apache-2.0
"""The one output form of every benchmark: ``NAME: VALUE (target OP VALUE) ok|MISS``.

Lines starting with ``#`` are context; a script reads the figures with
``grep -E '^[a-z_\\[\\]]+: '``.
"""

from __future__ import annotations


def figure(name: str, value: float, op: str, target: float) -> str:
    ok = value <= target if op == "<=" else value >= target
    return f"{name}: {value:.4g} (target {op} {target}) {'ok' if ok else 'MISS'}"
