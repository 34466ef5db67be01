"""A failed test's report ends with the logs of the workers it left running (a timeout included).

Why: each worker a test starts (``tests/support/processes.py``'s ``WorkerProcess``) writes its log
under the run's temporary folders, which are removed when the run ends; a test that failed or timed
out beside a live worker (a chat stream not ended after 117 s, in a loaded suite of 2026-12-08) left
nothing to read but its own traceback. pytest-timeout fails a test from inside it, so its report
comes here too.

Loaded by ``-p`` in pyproject.toml's addopts, so that it serves every test, wherever its file is.
It imports nothing itself: a process that never imported the worker helpers started no worker.
"""

from __future__ import annotations

import sys
from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                             pytest.TestReport]:
    report = yield
    processes = sys.modules.get("tests.support.processes")
    if report.failed and processes is not None:
        report.sections.extend(processes.running_worker_logs())
    return report
