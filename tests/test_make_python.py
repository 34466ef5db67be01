"""Which Python ``make`` makes the virtualenv from (issue #45): the distribution's own ``python3`` where
it is 3.11 or newer and has pip, else ``python3`` on ``PATH``.

Why: the distribution builds its Python with profile-guided and link-time optimisation, as the image's
is built; pyenv's and other default builds from source are not, and cost every process of ours a fifth
to a third more CPU (bench/README.md). The suite is CPU-bound on two cores, so it takes a fifth longer
on pyenv's 3.11 than on Debian's. Checked with ``make -n`` (nothing runs) for a virtualenv that does
not exist yet: the recipe's first line names the interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def interpreter_chosen(tmp_path: Path, system_python: Path | str) -> str:
    """The interpreter ``make`` would make ``tmp_path/venv`` from, with ``system_python`` standing
    for the distribution's."""
    venv = tmp_path / "venv"
    result = subprocess.run(["make", "-n", "--no-print-directory", f"VENV={venv}", f"SYSTEM_PYTHON={system_python}",
                             f"{venv}/.installed"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True)
    first = result.stdout.splitlines()[0]
    assert first.endswith(f" -m venv --without-pip {venv}"), first
    return first.split(" -m venv", 1)[0]


def test_the_distributions_python_is_chosen_where_it_is_3_11_with_pip(tmp_path: Path) -> None:
    assert sys.version_info >= (3, 11)
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, check=False)
    assert pip.returncode == 0, "the suite's virtualenv has pip (the test extras)"
    assert interpreter_chosen(tmp_path, sys.executable) == sys.executable


def test_python3_on_path_is_chosen_where_the_distribution_has_none(tmp_path: Path) -> None:
    assert interpreter_chosen(tmp_path, tmp_path / "no-such-python") == "python3"


def test_python3_on_path_is_chosen_where_the_distributions_has_no_pip(tmp_path: Path) -> None:
    """A Python without pip could not install uv into the virtualenv (the recipe's second step)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=60)
    assert subprocess.run([bare / "bin" / "python", "-m", "pip", "--version"], capture_output=True).returncode != 0
    assert interpreter_chosen(tmp_path, bare / "bin" / "python") == "python3"
