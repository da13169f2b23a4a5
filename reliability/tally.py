# SPDX-License-Identifier: Apache-2.0
"""What a family of cases found: how many were tried, how many handled."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Tally:
    family: str
    # What "handled" means for this family, as the table says it.
    promise: str
    tried: int = 0
    handled: int = 0
    failures: list[str] = field(default_factory=list)

    def ok(self) -> None:
        self.tried += 1
        self.handled += 1

    def fail(self, what: str) -> None:
        self.tried += 1
        self.failures.append(what)

    def record(self, problem: str | None, label: str = "") -> None:
        """One case: handled if ``problem`` is None, else a failure (labelled)."""
        if problem is None:
            self.ok()
        else:
            self.fail(f"{label}: {problem}" if label else problem)

    @property
    def all_handled(self) -> bool:
        return self.tried > 0 and self.handled == self.tried


def table(tallies: list[Tally]) -> str:
    """The suite's table: one row per family, then each failure in full."""
    rows = [("case family", "tried", "handled", "promise")]
    rows += [(t.family, str(t.tried), str(t.handled), t.promise) for t in tallies]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}"
        for r in rows
    ]
    total = sum(t.tried for t in tallies), sum(t.handled for t in tallies)
    lines.append(
        f"{'all':<{widths[0]}}  {total[0]:>{widths[1]}}  {total[1]:>{widths[2]}}"
    )
    for t in tallies:
        lines += [f"FAILED {t.family}: {f}" for f in t.failures]
    return "\n".join(lines)
