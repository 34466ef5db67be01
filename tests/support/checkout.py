"""A copy of this checkout, for the tests that need another one: another build of the workflow
(tests/test_deploy.py) or a checkout whose ``.deerflow/`` a test may fill (tests/test_hermetic.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.processes import REPO_DIR

# Never copied: history, the environment, the state and build outputs (a copy starts without them).
NOT_COPIED = (".git", ".venv", ".deerflow", "build", "__pycache__", "*.egg-info", "node_modules", ".env", "conf.yaml")


def copy_checkout(destination: Path, *, tests: bool = False) -> Path:
    """The product's code (and, with ``tests``, the suite) copied to ``destination``; runs with this venv."""
    skipped = NOT_COPIED if tests else (*NOT_COPIED, "tests", "bench")
    shutil.copytree(REPO_DIR, destination, ignore=shutil.ignore_patterns(*skipped))
    return destination
