"""Builds can be told apart: every entry point's ``--version`` and what the digest covers (issue #22).

Why: an operator with two images of one version in a fleet needs to see which one ran what. The
digest must cover exactly the code a process runs: every package and script pyproject.toml ships
(a package left out would change without the digest changing), and no test or bench.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from runtime import build_info
from tests.support.processes import REPO_DIR

ENTRY_POINTS = (["worker.py"], ["starter.py"], ["starter.py", "serve"], ["starter.py", "codec-server"])


def test_the_digest_covers_every_package_and_module_the_project_ships() -> None:
    setup = tomllib.loads((REPO_DIR / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert {name.split(".")[0] for name in setup["packages"]} == set(build_info.PACKAGES)
    assert {f"{name}.py" for name in setup["py-modules"]} == set(build_info.MODULES)


def test_every_entry_point_prints_the_version_and_the_code_digest() -> None:
    processes = [subprocess.Popen([sys.executable, str(REPO_DIR / script), *args, "--version"], cwd=REPO_DIR,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for script, *args in ENTRY_POINTS]
    expected = build_info.build_label()
    assert re.fullmatch(r"deerflow-temporal \S+ \(code [0-9a-f]{12}\)", expected)
    for command, process in zip(ENTRY_POINTS, processes, strict=True):
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0 and out.strip() == expected, (command, out, err)
