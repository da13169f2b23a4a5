# SPDX-License-Identifier: Apache-2.0
"""What a pre-flight check finds: one problem, why it matters, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass
class Finding:
    severity: str
    what: str
    why: str
    fix: str
