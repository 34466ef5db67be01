"""The codebase stays ruff-clean: style is checked by the test command, not by memory."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing() -> None:
    ruff = Path(sysconfig.get_path("scripts")) / "ruff"
    command = [str(ruff)] if ruff.exists() else [sys.executable, "-m", "ruff"]
    result = subprocess.run([*command, "check", "--no-cache", "."], cwd=REPO_DIR, capture_output=True, text=True,
                            check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
