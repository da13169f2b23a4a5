# SPDX-License-Identifier: Apache-2.0
"""The one way a test waits for something: poll until true, or fail saying what."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.1,
    give_up: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``condition`` until it returns something true and return that.

    Fails the test with ``what`` (a text, or a function giving one, called only
    then) after ``timeout`` seconds; ``give_up`` is asked at each poll and fails
    the test at once with what it returns when that is not None (a process that
    ended, say): waiting longer could not help.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if give_up is not None and (reason := give_up()) is not None:
            raise AssertionError(reason)
        if time.monotonic() >= deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"{text} (waited {timeout:g} s)")
        time.sleep(interval)
