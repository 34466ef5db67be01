"""Product code stays in small pieces: no module over 500 lines, no function over 60 (issue #20).

A long module or function is where a second job hides; the limits make the split happen when
the code is written, not in a later clean-up. A piece that is better long says why, in its own
docstring, with the marker :data:`EXEMPT_MARKER` followed by the reason, for example::

    def _plan(body):
        \"\"\"DeerFlow's plan object. Size: exempt because the two languages' plans read best side by side.\"\"\"

The marker exempts only the module (its line count) or only the function it documents, and an
exemption on a piece within its limit fails too, so none outlives its reason. ``grep -rn
"Size: exempt because"`` lists them all. Product code is every tracked ``.py`` file outside
``tests/`` and ``bench/``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
EXEMPT_MARKER = "Size: exempt because"
# The marker, then a reason of at least a few words: "Size: exempt because." exempts nothing.
_EXEMPTION = re.compile(re.escape(EXEMPT_MARKER) + r"\s+\S+(\s+\S+){2,}")
NOT_PRODUCT = ("tests/", "bench/")


@dataclass(frozen=True)
class Offender:
    """One piece over its limit, or one exemption without a piece over its limit."""

    where: str  # path:line
    what: str  # "module" or the function's qualified name
    lines: int
    limit: int
    exempt: bool  # True: a stale exemption (the piece is within its limit)

    def __str__(self) -> str:
        if self.exempt:
            return f"{self.where}: {self.what} is {self.lines} lines, within {self.limit}: drop its size exemption"
        return (f"{self.where}: {self.what} is {self.lines} lines, over {self.limit}: split it by concern, "
                f'or say why not in its docstring ("{EXEMPT_MARKER} ...")')


def product_modules() -> list[Path]:
    """Every tracked Python file of the product, relative to the repository."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_DIR, capture_output=True, text=True, check=True)
    return [Path(name) for name in listed.stdout.split() if not name.startswith(NOT_PRODUCT)]


def is_exempt(docstring: str | None) -> bool:
    return bool(docstring and _EXEMPTION.search(docstring))


def offenders(path: str, source: str) -> list[Offender]:
    """What in one module breaks the limits, or carries an exemption it does not need."""
    tree = ast.parse(source, filename=path)
    found = [*_judge(f"{path}:1", "module", len(source.splitlines()), MAX_MODULE_LINES, ast.get_docstring(tree))]
    for node, name in _functions(tree, ""):
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        found += _judge(f"{path}:{node.lineno}", name, lines, MAX_FUNCTION_LINES, ast.get_docstring(node))
    return found


def _judge(where: str, what: str, lines: int, limit: int, docstring: str | None) -> list[Offender]:
    exempt = is_exempt(docstring)
    if (lines > limit) != exempt:
        return [Offender(where, what, lines, limit, exempt)]
    return []


def _functions(node: ast.AST, prefix: str) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function and method under ``node`` (nested ones too), with its qualified name."""
    found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                found.append((child, f"{name}()"))
            found += _functions(child, f"{name}.")
        else:
            found += _functions(child, prefix)
    return found


def test_product_modules_and_functions_stay_within_their_limits() -> None:
    modules = product_modules()
    assert len(modules) > 50, "git ls-files found too few modules: is this a git checkout?"
    found = [offender for path in modules
             for offender in offenders(str(path), (REPO_DIR / path).read_text(encoding="utf-8"))]
    for offender in found:
        print(offender)
    if found:
        pytest.fail(f"{len(found)} size problem(s):\n" + "\n".join(map(str, found)), pytrace=False)


def test_the_limits_catch_a_long_function_and_honour_a_stated_reason() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    long_function = f'def long():\n    """Does a lot."""\n{body}'
    assert [str(o) for o in offenders("m.py", long_function)] == [
        f"m.py:1: long() is {MAX_FUNCTION_LINES + 2} lines, over {MAX_FUNCTION_LINES}: split it by concern, "
        f'or say why not in its docstring ("{EXEMPT_MARKER} ...")'
    ]
    reasoned = long_function.replace("Does a lot.", f"Does a lot. {EXEMPT_MARKER} the steps read as one table.")
    assert offenders("m.py", reasoned) == []
    assert len(offenders("m.py", long_function.replace("Does a lot.", f"Does a lot. {EXEMPT_MARKER}."))) == 1
    method = "class C:\n    " + long_function.replace("\n", "\n    ")
    assert [o.what for o in offenders("m.py", method)] == ["C.long()"]


def test_the_limits_catch_a_long_module_and_a_stale_exemption() -> None:
    long_module = '"""A module."""\n' + "x = 1\n" * MAX_MODULE_LINES
    assert [(o.what, o.exempt) for o in offenders("m.py", long_module)] == [("module", False)]
    stale = f'def short():\n    """Short. {EXEMPT_MARKER} it once was long."""\n'
    assert [(o.what, o.exempt) for o in offenders("m.py", stale)] == [("short()", True)]
