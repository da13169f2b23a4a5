# SPDX-License-Identifier: Apache-2.0
"""A real headless browser for the report page tests: Debian's chromium, driven
by Playwright's Python client (no `playwright install`: it drives the system's
binary). `.ci/run` installs chromium as root; `make test` never installs it, and
the tests that need it are skipped with the reason when it is absent (failed in
CI: support.system_parts).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.system_parts import missing_system_part

CHROMIUM = "/usr/bin/chromium"
# Headless, offline: nothing of the browser's own reaches the network, so a page
# that fetched anything would show it missing.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing_browser() -> str | None:
    """Why no browser test can run here, or None when one can."""
    if not os.access(CHROMIUM, os.X_OK):
        return (
            f"no headless browser: {CHROMIUM} is not installed (Debian package "
            "chromium; .ci/run installs it as root, `make test` does not)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return (
            "the playwright Python package is not installed (requirements/cpu.txt; "
            "`make setup` installs it)"
        )
    return None


@pytest.fixture
def headless_browser() -> None:
    """The test needs a headless browser: skipped where there is none (failed in
    CI). tests/conftest.py makes it visible to every test module."""
    if (why := missing_browser()) is not None:
        missing_system_part(why)


needs_browser = pytest.mark.usefixtures("headless_browser")


@contextlib.contextmanager
def open_page(path: str, width: int = 1280, height: int = 900) -> Iterator:
    """The HTML file at ``path`` in headless chromium, with every request that
    leaves the file refused and counted (``page.outside_requests``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            outside: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))

            def refuse(route):
                if not route.request.url.startswith(("file:", "data:", "about:")):
                    outside.append(route.request.url)
                    return route.abort()
                return route.continue_()

            page.route("**/*", refuse)
            # as_uri: the file name percent-encoded byte by byte (any name, valid
            # UTF-8 or not; a backslash would otherwise become a slash).
            page.goto(Path(os.path.abspath(path)).as_uri())
            page.errors, page.outside_requests = errors, outside
            yield page
        finally:
            browser.close()
