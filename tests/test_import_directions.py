"""Imports between the top-level packages run one way only, down the layers ARCHITECTURE.md draws.

Why a test: an arrow back up (storage importing runtime while runtime imports storage, a front door
importing worker code) is how the house turns into one room again, and nothing else notices it.
Every product module's imports are read with ``ast`` (those inside functions too, as the lazy ones
are real dependencies), so the order is checked on the code, not on what is imported at start-up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
NOT_PRODUCT = {"tests", "bench", "build", "deploy"}

# Top to bottom. A package may import its own modules and those of any layer below its own, never
# one above, nor a neighbour in its own layer (so the CLI and the API server never import each other).
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"worker", "starter"}),  # the entry points
    frozenset({"cli", "server", "hosting"}),  # the front doors; the worker's plumbing
    frozenset({"sandbox"}),  # the coder's Python, on its own queue
    frozenset({"activities"}),  # all I/O of a run
    frozenset({"runtime"}),  # what every client and the worker share
    frozenset({"storage", "offline"}),  # the blob stores; the bundled fake model and corpus
    frozenset({"config"}),  # settings and the operator's policies
    frozenset({"workflows"}),  # deterministic, imports nothing of ours
)
LAYER_OF = {package: depth for depth, layer in enumerate(LAYERS) for package in layer}


def product_modules() -> Iterator[Path]:
    for path in sorted(REPO_DIR.rglob("*.py")):
        parts = path.relative_to(REPO_DIR).parts
        if parts[0] not in NOT_PRODUCT and not any(part.startswith(".") for part in parts):
            yield path


def top_level(path: Path) -> str:
    return path.relative_to(REPO_DIR).parts[0].removesuffix(".py")


def imported_names(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every absolute import in the module, at any depth (relative ones stay in their package)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def violations(path: Path, source: str) -> list[str]:
    """The imports of one module that point up the layers or sideways into a neighbour."""
    package = top_level(path)
    found = []
    for line, name in imported_names(ast.parse(source)):
        target = name.split(".")[0]
        if target == package or target not in LAYER_OF:
            continue  # its own package, or not ours (the standard library, a dependency)
        if LAYER_OF[target] <= LAYER_OF[package]:
            found.append(f"{path.relative_to(REPO_DIR)}:{line} imports {name} ({package} may not import {target})")
    return found


def test_every_top_level_package_has_a_layer() -> None:
    packages = {top_level(path) for path in product_modules()}
    assert packages - LAYER_OF.keys() == set(), "place the new package in LAYERS (and ARCHITECTURE.md)"


def test_imports_run_down_the_layers_only() -> None:
    found = [line for path in product_modules() for line in violations(path, path.read_text(encoding="utf-8"))]
    assert found == [], "\n".join(found)


def test_the_check_sees_imports_inside_functions_and_between_neighbours() -> None:
    lazy = "def serve():\n    from cli.terminal import printable\n"
    assert violations(REPO_DIR / "server" / "serve.py", lazy) == [
        "server/serve.py:2 imports cli.terminal (server may not import cli)"]
    assert violations(REPO_DIR / "storage" / "gc.py", "import runtime.encryption\n") != []
    assert violations(REPO_DIR / "runtime" / "converter.py", "from storage import filesystem\n") == []


def test_the_sandbox_reaches_into_no_activity_module() -> None:
    """The sandbox's queue runs apart from the activities' (issue #47): what the two share (heartbeats) lives
    in runtime/, so the sandbox's worker imports nothing of activities/, not even its support package."""
    sandbox = sorted((REPO_DIR / "sandbox").glob("*.py"))
    found = [f"{path.name}:{line} {name}" for path in sandbox
             for line, name in imported_names(ast.parse(path.read_text(encoding="utf-8")))
             if name.split(".")[0] == "activities"]
    assert found == []


# Inside workflows/, the wings in the same way, top to bottom (ARCHITECTURE.md): the research pipeline and the
# content flows never import each other, and the contracts clients import carry none of the workflows' logic.
WORKFLOW_WINGS: tuple[frozenset[str], ...] = (
    frozenset({"catalog"}),  # every workflow type
    frozenset({"research", "content"}),  # DeepResearchWorkflow and its stages; the small flows
    frozenset({"calls"}),  # activity options, queues, slots, the model call, input decoding
    frozenset({"contracts"}),  # what crosses a boundary
    frozenset({"text"}),  # pure readings of unvetted text
)
WING_OF = {wing: depth for depth, layer in enumerate(WORKFLOW_WINGS) for wing in layer}


def workflow_wing(dotted_or_path: str) -> str:
    """``research`` for ``workflows.research.tools`` and ``workflows/research/tools.py``; ``catalog`` for the
    top-level module."""
    return dotted_or_path.replace("/", ".").removesuffix(".py").split(".")[1]


def wing_violations(path: Path, source: str) -> list[str]:
    """The imports of one workflows/ module that point up the wings or sideways into a neighbour."""
    wing = workflow_wing(str(path.relative_to(REPO_DIR)))
    return [f"{path.relative_to(REPO_DIR)}:{line} imports {name} ({wing} may not import {target})"
            for line, name in imported_names(ast.parse(source))
            if name.startswith("workflows.") and (target := workflow_wing(name)) != wing
            and WING_OF[target] <= WING_OF[wing]]


def test_every_workflows_module_is_in_a_wing() -> None:
    modules = {workflow_wing(str(path.relative_to(REPO_DIR))) for path in (REPO_DIR / "workflows").rglob("*.py")
               if path.name != "__init__.py" or path.parent.name != "workflows"}
    assert modules - WING_OF.keys() == set(), "place the new wing in WORKFLOW_WINGS (and ARCHITECTURE.md)"


def test_workflows_wings_import_down_only() -> None:
    found = [line for path in sorted((REPO_DIR / "workflows").rglob("*.py")) if path.parent.name != "workflows"
             or path.name != "__init__.py" for line in wing_violations(path, path.read_text(encoding="utf-8"))]
    assert found == [], "\n".join(found)


def test_the_wing_check_sees_neighbours_and_upward_imports() -> None:
    content = REPO_DIR / "workflows" / "content" / "speech.py"
    assert wing_violations(content, "from workflows.research.run_input import parse_inputs\n") == [
        "workflows/content/speech.py:1 imports workflows.research.run_input (content may not import research)"]
    assert wing_violations(REPO_DIR / "workflows" / "contracts" / "status.py", "import workflows.calls.queues\n") != []
    assert wing_violations(content, "from workflows.calls.inputs import decode_input\n") == []
