"""``activities.support.isolated``: jobs in killable child processes, with kernel-enforced limits.

The jobs are module-level functions of this file, so the fork server imports them by name.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from activities.support import isolated
from activities.support.isolated import Limits, Outcome, run_blocking, run_isolated
from config.settings import Settings

MB = 1024 * 1024
ROOMY = Limits(cpu_seconds=30, memory_bytes=1024 * MB, max_concurrency=8)
# A deadline no test here is about: children run at a lower priority, and beside busy loops the fork
# server's cold start alone outlasted 10 s.
WALL = 240.0  # under the suite's 300 s test timeout


def echo_twice(payload: bytes, suffix: str) -> Iterator[str]:
    yield payload.decode() + suffix
    yield suffix


def spin(payload: bytes) -> Iterator[None]:
    while True:
        pass
    yield None


def hog_memory(payload: bytes) -> Iterator[int]:
    yield len(b"x" * (512 * MB))


def first_then_hang(payload: bytes) -> Iterator[str]:
    yield "quick"
    time.sleep(3600)
    yield "never"


def niceness(payload: bytes) -> Iterator[int]:
    yield os.nice(0)


def boom(payload: bytes) -> Iterator[None]:
    raise ValueError("boom")
    yield None


def nap(payload: bytes) -> Iterator[None]:
    time.sleep(0.5)
    yield None


def test_values_come_back_in_order() -> None:
    assert run_blocking(echo_twice, b"payload", ("!",), [WALL, WALL], ROOMY) == Outcome(values=["payload!", "!"])


def test_a_late_value_kills_the_child_and_keeps_the_earlier_ones() -> None:
    started = time.monotonic()
    outcome = run_blocking(first_then_hang, b"", (), [WALL, 0.3], ROOMY)
    # Far short of the child's hour of sleep; not tighter: the child runs at a lower priority, and
    # beside busy loops its start alone took 7 s.
    assert time.monotonic() - started < 120
    assert outcome == Outcome(values=["quick"], timed_out_after=0.3)


def test_cpu_limit_is_enforced_by_the_kernel() -> None:
    """Even with a generous wall deadline, RLIMIT_CPU (SIGXCPU) ends a spinning child.

    Told by how it ended, not by the wall time: the child runs at a lower priority, so beside busy
    loops its one CPU second can take many seconds of wall time (14 s was read at a load of 12, and more than
    30 s at nice 15 beside two busy loops, where a nice-19 child gets about 1/70 of a core)."""
    outcome = run_blocking(spin, b"", (), [WALL], Limits(cpu_seconds=1, memory_bytes=1024 * MB, max_concurrency=8))
    assert outcome.timed_out_after is None, "the wall deadline, not the CPU limit, ended it"
    assert outcome.values == []
    assert outcome.error == "the extraction process ended without an answer (exit code -24)"  # SIGXCPU


def test_memory_limit_is_enforced_by_the_kernel() -> None:
    limits = Limits(cpu_seconds=30, memory_bytes=400 * MB, max_concurrency=8)
    outcome = run_blocking(hog_memory, b"", (), [WALL], limits)
    assert outcome.error == "MemoryError: over the extraction memory limit"


def test_children_run_at_lower_priority() -> None:
    """So heavy extraction yields the CPU to the worker's own event loop and threads."""
    # The kernel caps niceness at 19 (a worker already at nice 15 cannot go 10 lower in priority).
    assert run_blocking(niceness, b"", (), [WALL], ROOMY).values == [min(19, os.nice(0) + isolated.CHILD_NICENESS)]


def test_an_answer_over_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolated, "MAX_MESSAGE_BYTES", 100)
    outcome = run_blocking(echo_twice, b"x" * 1000, ("!",), [WALL, WALL], ROOMY)
    assert outcome == Outcome(error="the extraction process sent a malformed answer (OSError)")


def test_an_exception_is_reported_not_raised() -> None:
    assert run_blocking(boom, b"", (), [WALL], ROOMY).error == "ValueError: boom"


async def test_concurrency_is_bounded_by_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolated, "_executors", {})
    two_at_once = Limits.for_budget(10, Settings(DEERFLOW_EXTRACT_MAX_CONCURRENCY=2))
    started = time.monotonic()
    await asyncio.gather(*(run_isolated(nap, b"", (), [10], two_at_once) for _ in range(4)))
    elapsed = time.monotonic() - started
    assert elapsed >= 1.0  # two rounds of two 0.5 s naps


def test_the_fork_server_imports_only_what_extraction_needs() -> None:
    """Every worker serving crawls or documents starts a fork server, and every child is a fork of
    it: it must not carry the worker's settings, HTTP client or Temporal SDK (a second of CPU per
    worker start, and pages every fork copies). Imported in a fresh interpreter, as the fork server does."""
    heavy = ("config.settings", "pydantic", "httpx", "temporalio", "openai", "langchain_core")
    script = (f"import sys; [__import__(name) for name in {isolated.PRELOAD!r}]; "
              f"print(sorted(name for name in {heavy!r} if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout
