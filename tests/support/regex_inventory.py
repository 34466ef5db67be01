"""Every regular expression the product compiles, found in its source (for tests/test_redos.py).

A call ``re.<function>(<pattern>, …)`` with a literal pattern is read from the syntax tree, its
flags evaluated; a module-level ``NAME = re.compile(<expression>)`` whose pattern is built (an
f-string, a join) is read from the imported module. Any other call is reported as unresolved,
so a pattern the check cannot read is listed by hand rather than missed.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The product's code. Not offline/: the bundled fake model and search corpus, for the demo and the
# tests, which read back text they wrote themselves.
PRODUCT = ("workflows", "activities", "server", "cli", "runtime", "hosting", "sandbox", "storage", "config",
           "starter.py", "worker.py")
# Where each function takes its flags, counting the pattern as 0.
FLAGS_AT = {"compile": 1, "search": 2, "match": 2, "fullmatch": 2, "findall": 2, "finditer": 2, "split": 3,
            "sub": 4, "subn": 4}


ANCHORED_CALLS = frozenset({"match", "fullmatch"})


@dataclass(frozen=True)
class FoundPattern:
    where: str  # "path:line"
    pattern: str | bytes | None  # None: unresolved
    flags: int
    source: str  # the call as written, for a message
    anchored_call: bool  # only ever matched at one position (``match``, ``fullmatch``)


def product_files() -> Iterator[Path]:
    for entry in PRODUCT:
        path = REPO / entry
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _flags(call: ast.Call, function: str) -> int:
    node = next((keyword.value for keyword in call.keywords if keyword.arg == "flags"), None)
    if node is None and len(call.args) > FLAGS_AT[function]:
        node = call.args[FLAGS_AT[function]]
    return int(eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re})) if node is not None else 0


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _uses(tree: ast.Module, name: str) -> set[str]:
    """The methods called on the module-level ``name`` anywhere in the module."""
    return {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name}


def patterns_in(path: Path) -> Iterator[FoundPattern]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_level = {id(node.value): node.targets[0].id for node in tree.body if isinstance(node, ast.Assign)
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in FLAGS_AT and node.args):
            continue
        where, source = f"{path.relative_to(REPO)}:{node.lineno}", ast.unparse(node)[:120]
        name = module_level.get(id(node))
        uses = _uses(tree, name) if name else {node.func.attr}
        anchored = bool(uses) and uses <= ANCHORED_CALLS
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str | bytes):
            yield FoundPattern(where, first.value, _flags(node, node.func.attr), source, anchored)
        elif name:
            compiled = getattr(importlib.import_module(_module_name(path)), name)
            yield FoundPattern(where, compiled.pattern, compiled.flags, source, anchored)
        else:
            yield FoundPattern(where, None, 0, source, anchored)


def product_patterns() -> list[FoundPattern]:
    return [found for path in product_files() for found in patterns_in(path)]
