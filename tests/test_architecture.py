# SPDX-License-Identifier: Apache-2.0
"""The package's shape (docs/architecture.md): few top-level modules, small classes.

The import layers are checked by ``make lint`` (import-linter); these are the
size rules it cannot check.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "areal_debug"
MAX_TOP_LEVEL_MODULES = 12
MAX_CLASS_LINES = 300


def code_lines(source: str, node: ast.ClassDef) -> int:
    """Lines of code in ``node``: no blank lines, comments or docstrings, and no
    field declarations of a dataclass (``name: type = field(...)``)."""
    skipped: set[int] = set()
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (
            isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            skipped.update(range(body[0].lineno, body[0].end_lineno + 1))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign):
            skipped.update(range(stmt.lineno, stmt.end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        code.update(range(tok.start[0], tok.end[0] + 1))
    span = range(node.lineno, node.end_lineno + 1)
    return len([n for n in span if n in code and n not in skipped])


def classes():
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                yield (
                    path.relative_to(PACKAGE.parent),
                    node.name,
                    code_lines(source, node),
                )


def test_no_class_is_over_300_lines_of_code():
    sizes = list(classes())
    assert len(sizes) > 50  # the walk found the package's classes
    big = [f"{path}: {name} {n}" for path, name, n in sizes if n > MAX_CLASS_LINES]
    assert big == [], "split these (one job per class):\n" + "\n".join(big)


def test_the_line_count_skips_docstrings_comments_and_fields():
    source = (
        "class C:\n"
        '    """Doc\n    string."""\n'
        "    a: int = 1\n"
        "    # a comment\n"
        "\n"
        "    def f(self):\n"
        '        """Doc."""\n'
        "        return (1 +\n"
        "                2)\n"
    )
    (node,) = ast.parse(source).body
    assert code_lines(source, node) == 4  # class, def, and the two-line return


def test_at_most_12_modules_directly_in_the_package():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    # The subsystems are packages (docs/architecture.md).
    for package in ("recording", "stages", "compare", "modes", "single_controller"):
        assert (PACKAGE / package / "__init__.py").is_file(), package
