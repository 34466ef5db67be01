"""Every import of product code is declared in pyproject.toml (issue #22).

Why: a module imported by product code but declared nowhere (cryptography for the encryption codec
was only in the test extras) is installed today only because some dependency pulls it in, and an
upgrade of that dependency breaks a deployment that tests never see. deptry reads pyproject.toml's
``[tool.deptry]`` (tests and benches excluded, the test extras as development dependencies) and
maps each import to its installed distribution.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_product_import_is_a_declared_dependency() -> None:
    result = subprocess.run([sys.executable, "-m", "deptry", "--no-ansi", "."], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
