"""A pytest process imports its tests with the garbage collector off, and runs them with it on
(tests/support/import_pause.py, issue #45: a process's collection took 13-15 s of CPU, 8 s paused).

Checked in a pytest process of its own, started as ``make test`` starts one (the project's
configuration, with and without xdist), over a test that reports what it finds: the collector on,
and the imports frozen. Left off, the suite's processes would grow their cyclic garbage unbounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = '''
import gc
import json
import os
from pathlib import Path


def test_probe():
    Path(os.environ["PROBE_REPORT"]).write_text(json.dumps([gc.isenabled(), gc.get_freeze_count()]))
'''


@pytest.mark.parametrize("processes", [[], ["-n", "1"]], ids=["one process", "xdist"])
def test_the_tests_run_with_the_collector_on_over_frozen_imports(tmp_path: Path, processes: list[str]) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
                             "-p", "no:cacheprovider", "-q", *processes, str(tmp_path / "test_probe.py")],
                            cwd=ROOT, env={**os.environ, "PROBE_REPORT": str(report)}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    enabled, frozen = json.loads(report.read_text())
    assert enabled, "the tests ran with the garbage collector off"
    assert frozen > 10_000, f"{frozen} objects frozen: the imports were not paused"  # pytest's own are more
