# SPDX-License-Identifier: Apache-2.0
"""The package's shape (docs/architecture.md): few modules per package, small
classes, no import cycles.

The import layers are checked by ``make lint`` (import-linter); these are the
rules it cannot check.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "areal_debug"
MAX_MODULES_PER_PACKAGE = 12
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 600


def classes():
    """``(path, class name, lines)`` of every class of the package, its lines
    counted as they stand in the file: docstrings, comments, fields and blank
    lines included (what a reader scrolls through)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                yield (
                    path.relative_to(PACKAGE.parent),
                    node.name,
                    node.end_lineno - node.lineno + 1,
                )


def test_no_class_is_over_300_lines():
    sizes = list(classes())
    assert len(sizes) > 50  # the walk found the package's classes
    big = [f"{path}: {name} {n}" for path, name, n in sizes if n > MAX_CLASS_LINES]
    assert big == [], "split these (one job per class):\n" + "\n".join(big)


def test_no_module_is_over_600_lines():
    """A module is one concept a reader holds at once: past 600 lines, docstrings
    and comments counted, it is two (issue 69, point 12)."""
    sizes = {
        str(p.relative_to(PACKAGE.parent)): p.read_text().count("\n")
        for p in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 100  # the walk found the package's modules
    big = sorted(f"{p} {n}" for p, n in sizes.items() if n > MAX_MODULE_LINES)
    assert big == [], "split these by concept:\n" + "\n".join(big)


def packages() -> list[Path]:
    """areal_debug and every package in it (a folder with an ``__init__.py``;
    ``examples/`` and ``inspect/reproducer/files/`` are package data)."""
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def test_at_most_12_modules_in_every_package():
    """The rule of the package's root holds in each package and subpackage: at
    most 12 modules besides its ``__init__.py``, or a subpackage is due."""
    crowded = {}
    for package in packages():
        modules = sorted(
            p.name for p in package.glob("*.py") if p.name != "__init__.py"
        )
        if len(modules) > MAX_MODULES_PER_PACKAGE:
            crowded[str(package.relative_to(PACKAGE.parent))] = modules
    assert crowded == {}, crowded
    # The subsystems are packages (docs/architecture.md).
    for package in (
        "recording",
        "recording/writer",
        "recording/writer/process",
        "stages",
        "compare",
        "modes",
        "single_controller",
    ):
        assert (PACKAGE / package / "__init__.py").is_file(), package


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imported(path: Path, modules: set[str], name: str | None = None) -> set[str]:
    """The modules of areal_debug that ``path`` imports, at its top or inside a
    function (a lazy import is still a cycle), not under ``TYPE_CHECKING``.
    ``from package import name`` names the module ``package.name`` when there is
    one, else the package; a package's ``__init__`` running before its modules is
    not counted as their import of it."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                for stmt in child.orelse:
                    visit(stmt)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                subs = {f"{base}.{alias.name}" for alias in child.names}
                found.update((subs & modules) or {base})
            visit(child)

    visit(ast.parse(path.read_text()))
    # A module that imports itself by its own name runs as __main__ (the writer
    # process's server): not a cycle between modules.
    return (found & modules) - {name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    modules = set(paths)
    return {name: imported(path, modules) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more
    than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


# Cycles that predate this test, outside recording/ (issue 40): each is to be
# broken, and this list emptied; one broken already fails the test below, so it
# cannot linger here.
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycles():
    """No module of areal_debug imports, through any chain, one that imports it
    back: within a package (recording/ and its writer wing above all) or across."""
    graph = import_graph()
    # The graph is the package's, lazy imports included.
    assert "areal_debug.recording.writer.process.server" in graph
    assert (
        "areal_debug.recording.writer.process.client"
        in graph["areal_debug.recording.writer.router"]
    )
    found = cycles(graph)
    assert [c for c in found if c not in KNOWN_CYCLES] == [], found
    assert [c for c in KNOWN_CYCLES if c not in found] == [], (
        "broken: take it off KNOWN_CYCLES"
    )


def test_the_cycle_finder_finds_cycles_lazy_imports_included(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from areal_debug.recording import format, atomic\n"
        "if TYPE_CHECKING:\n"
        "    from areal_debug.recording import reader\n"
        "def f():\n"
        "    from areal_debug.recording.lock import writer_of\n"
    )
    modules = {
        f"areal_debug.recording.{m}" for m in ("format", "atomic", "reader", "lock")
    }
    everything = modules | {"areal_debug.recording"}
    assert imported(source, everything, "areal_debug.recording.m") == modules - {
        "areal_debug.recording.reader"
    }


def test_the_store_contract_names_every_module_at_the_stores_top():
    """`make lint` keeps the store's top (recording/) off its writer wing; a
    module added there is under that contract too."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("forbidden_modules") == ["areal_debug.recording.writer"]
    ]
    top = PACKAGE / "recording"
    assert sorted(contract["source_modules"]) == sorted(
        f"areal_debug.recording.{p.stem}"
        for p in top.glob("*.py")
        if p.stem != "__init__"
    )


# Directories of package data, not packages: the shipped YAMLs and example scripts.
DATA_DIRS = {"configs", "examples"}


def test_every_top_level_module_is_in_an_import_layer():
    """import-linter checks only the layers it is told: a module or package of
    areal_debug's top that no layer names is checked by nothing."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    (layers,) = [
        c["layers"]
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("containers") == ["areal_debug"]
    ]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    top = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    top |= {
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file()
    }
    assert top - named == set(), "not in any layer of pyproject.toml"
    assert named - top == set(), "a layer names no module"
    # The data directories hold no package a layer could check.
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir()} - top - {
        "__pycache__"
    } == DATA_DIRS


def _import_layers() -> list[str]:
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    (layers,) = [
        c["layers"]
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("containers") == ["areal_debug"]
    ]
    return layers


def test_docs_architecture_agrees_with_the_layer_contract():
    """docs/architecture.md's "Layers" line is the contract's order, and its
    picture draws every layer's module once, in that order, none beside them."""
    layers = _import_layers()
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    line = doc[doc.index("- **Layers**: ") : doc.index("A module may import")]
    said = [m.strip(" `\n") for m in " ".join(line.split())[14:].split(">")]
    assert [s.strip(" .`") for s in said] == layers
    picture = doc[doc.index("```\n") + 4 : doc.index("  Beside the layers:")]
    # The names an entry draws are those before its rule (──).
    drawn = [
        name
        for row in picture.splitlines()
        if "─" in row
        for name in re.findall(r"([a-z_]+)(?:/|\.py)", row.split("─")[0])
    ]
    top = [m.strip() for layer in layers for m in layer.split("|")]
    # Each top-level module once, in the contract's order (a layer's parts in
    # any order); the subpackages drawn below their package are not top-level.
    firsts = [m for m in drawn if m in top]
    assert sorted(firsts) == sorted(top), (firsts, top)
    rank = {
        m: i for i, layer in enumerate(layers) for m in map(str.strip, layer.split("|"))
    }
    assert [rank[m] for m in firsts] == sorted(rank[m] for m in firsts), firsts
    beside = doc[doc.index("  Beside the layers:") : doc.index("```\n\n")]
    assert not any(f" {m}/" in beside or f" {m}.py" in beside for m in top), beside


def test_the_example_scripts_import_only_the_public_api_and_the_tiny_task():
    """examples/ is a directory of scripts users copy (package data, outside the
    layers): they import the package's public names and the tiny task's
    builders, nothing of its internals."""
    modules = set(import_graph()) | {"areal_debug"}
    for script in sorted((PACKAGE / "examples").glob("*.py")):
        got = imported(script, modules, name="examples." + script.stem)
        assert got <= {"areal_debug", "areal_debug.tooling.tiny_task"}, (script, got)
        assert "areal_debug" in got, script
