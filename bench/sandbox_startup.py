"""Start-up overhead of the python_repl_tool sandbox: 20 sequential runs of ``print(1)``.

Run from the repository root: ``.venv/bin/python bench/sandbox_startup.py``. Prints the median
and p90 wall time of one activity call, next to a bare ``python -I -u -c 'print(1)'`` for scale.
The mode probe (a few runs, once per worker process) happens before the measurement.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a plain script

from temporalio.testing import ActivityEnvironment

from sandbox.activity import python_repl_tool, sandbox_mode
from workflows.models import PythonRequest

RUNS = 20


def summary(seconds: list[float]) -> str:
    p90 = statistics.quantiles(seconds, n=10, method="inclusive")[8]
    return f"median {statistics.median(seconds) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"


async def sandbox_times() -> list[float]:
    env = ActivityEnvironment()
    request = PythonRequest(code="print(1)")
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        result = await env.run(python_repl_tool, request)
        times.append(time.perf_counter() - started)
        if result.stdout != "1\n":
            raise SystemExit(f"unexpected result: {result!r}")
    return times


def bare_times() -> list[float]:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-u", "-c", "print(1)"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


async def main() -> None:
    mode = await sandbox_mode()
    print(f"sandbox mode: {mode.name}" + (f" ({mode.reason})" if mode.reason else ""))
    print(f"python_repl_tool, {RUNS} runs of print(1): {summary(await sandbox_times())}")
    print(f"bare interpreter, {RUNS} runs of print(1): {summary(bare_times())}")


if __name__ == "__main__":
    asyncio.run(main())
