"""Size limits (issue #20): no product module over 500 lines, no function over 60, so each module
keeps one job and each function reads at a glance. Checked here, not by memory."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parent.parent
LIMITED = ("workflows",)  # the folders held to the limits
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

MODULES = sorted(path for folder in LIMITED for path in (REPO_DIR / folder).rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(REPO_DIR))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_a_module_stays_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines: split it by concern"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_its_functions_stay_short(path: Path) -> None:
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{_name(path)}: {', '.join(long)}"
