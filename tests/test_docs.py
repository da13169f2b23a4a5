# SPDX-License-Identifier: Apache-2.0
"""The README and docs/ hold together: every relative link and anchor resolves,
every CLI command and every ``debug.*`` key is documented. A page split or a
renamed heading that breaks a link fails here, not in a reader's browser."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from areal_debug import cli
from areal_debug.config import DebugConfig

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no {file.relative_to(ROOT)})")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.name})")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def documented() -> str:
    return "\n".join(p.read_text() for p in PAGES)


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    """The commands ``parser`` takes, in its order."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_every_cli_command_is_documented():
    text = documented()
    commands = subcommands(cli.build_parser())
    missing = [c for c in commands if f"areal-debug {c}" not in text]
    assert commands and not missing, missing


def test_every_cli_command_has_its_section_in_cli_md():
    """docs/cli.md is the command's reference: a ``## `name`: ...`` section each."""
    headings = re.findall(
        r"^## (.*)$", FENCE.sub("", (ROOT / "docs/cli.md").read_text()), re.M
    )
    sectioned = {name for h in headings for name in re.findall(r"`(\w+)`", h)}
    commands = subcommands(cli.build_parser())
    missing = [c for c in commands if c not in sectioned]
    assert commands and not missing, f"no section in docs/cli.md: {missing}"


def test_every_debug_key_is_documented():
    text = documented()
    missing = [
        f.name
        for f in dataclasses.fields(DebugConfig)
        if f"debug.{f.name}" not in text and f"`{f.name}`" not in text
    ]
    assert not missing, missing


def test_the_checks_see_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n[ok](#title) [gone](#nowhere) [file](missing.md)\n")
    assert anchors(page) == {"title"}
    assert links(page) == ["#title", "#nowhere", "missing.md"]


def test_the_help_lists_every_command():
    """The --help list of commands is made from cli.COMMANDS, as the parser is:
    it names every command the parser takes, once, in the parser's order."""
    parser = cli.build_parser()
    listed = re.findall(r"^areal-debug (\w+)", parser.epilog or "", re.M)
    assert listed == subcommands(parser) == [c.name for c in cli.COMMANDS]
    assert len(set(listed)) == len(listed)
    # The list is in the top-level --help itself.
    assert parser.epilog in parser.format_help()


def test_the_readme_is_short():
    """A newcomer reads it in five minutes; the rest is in docs/."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250)"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for target in links(ROOT / "README.md")
        if not re.match(r"[a-z]+:", target)
    }
    pages = sorted((ROOT / "docs").glob("*.md"))
    missing = [p.name for p in pages if p.resolve() not in linked]
    assert pages and not missing, f"docs pages not linked from README.md: {missing}"


def test_no_path_in_the_docs_depends_on_user_being_set():
    """AReaL's log directories are under the user's name (getpass.getuser), which
    containers and CI often run without $USER: the pages spell it $(whoami)."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "$USER" not in page.read_text(), page.name


def test_every_seam_is_in_the_usage_table():
    """docs/usage.md "What areal-debug needs from AReaL" lists the adapter's seam
    table as the code declares it."""
    from areal_debug.areal_compat.seams import SEAMS

    text = (ROOT / "docs" / "usage.md").read_text()
    for seam in SEAMS:
        params = f"({', '.join(seam.params)})" if seam.params else ""
        row = f"| `{seam.where}`{params} | {seam.use} | {seam.capability.value} |"
        assert row in text, row
