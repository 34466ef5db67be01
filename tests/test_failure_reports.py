"""A failed test's report shows the logs of the workers it left running (tests/support/failure_logs.py).

Why: the run's temporary folders, where the workers write their logs, are removed when it ends, so a
test that timed out beside a live worker (a chat stream not ended after 117 s, in a loaded suite of
2026-12-08) left nothing to read. Checked in a pytest process of its own, with the project's
configuration, over a test that starts a real worker and fails while it runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = '''
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import WorkerProcess


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[WorkerProcess]:
    started = WorkerProcess("127.0.0.2:9", tmp_path / "probe-worker.log", fresh=True).start()  # nothing listens
    yield started
    started.stop()


def test_probe(worker: WorkerProcess) -> None:
    deadline = time.monotonic() + 60
    while b"Stall watchdog" not in worker.log_path.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert False, "the probe fails while its worker runs"


def test_probe_after(tmp_path: Path) -> None:
    assert False, "the probe fails with no worker running"
'''


def test_a_failed_tests_report_ends_with_the_logs_of_the_workers_it_left_running(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    result = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
                             "-p", "no:cacheprovider", "-q", str(tmp_path / "test_probe.py")],
                            cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=180, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    running, stopped = output.split("test_probe_after", 1)[0], output.split("_ test_probe_after _", 1)[-1]
    assert "probe-worker.log (its last 8000 characters)" in running, output
    assert "Stall watchdog: an event loop stuck" in running, output  # the worker's own line, from its log
    assert "probe-worker.log" not in stopped.split("short test summary")[0], output  # a stopped worker is not shown
