"""Start-up overhead of the python_repl_tool sandbox: 20 sequential runs of ``print(1)``.

Run from the repository root: ``.venv/bin/python bench/sandbox_startup.py``. Prints the median
and p90 wall time of one activity call and the median CPU time of its processes (less sensitive to
other load on the machine), next to a bare ``python -I -u -c 'print(1)'`` for scale.
The mode probe (a few runs, once per worker process) happens before the measurement.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a plain script

from temporalio.testing import ActivityEnvironment

from config.settings import load_settings
from sandbox.activity import SandboxActivities
from workflows.contracts.tool_activities import PythonRequest

RUNS = 20


def summary(seconds: list[float]) -> str:
    p90 = statistics.quantiles(seconds, n=10, method="inclusive")[8]
    return f"median {statistics.median(seconds) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the bootstrap and the code, once reaped
    return usage.ru_utime + usage.ru_stime


async def sandbox_times(sandbox: SandboxActivities) -> tuple[list[float], list[float]]:
    """Wall time and child CPU time of each call."""
    env = ActivityEnvironment()
    request = PythonRequest(code="print(1)")
    times, cpu = [], []
    for _ in range(RUNS):
        started, cpu_before = time.perf_counter(), children_cpu()
        result = await env.run(sandbox.python_repl_tool, request)
        times.append(time.perf_counter() - started)
        cpu.append(children_cpu() - cpu_before)
        if result.stdout != "1\n":
            raise SystemExit(f"unexpected result: {result!r}")
    return times, cpu


def bare_times() -> list[float]:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-u", "-c", "print(1)"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


async def main() -> None:
    sandbox = SandboxActivities(load_settings())
    mode = await sandbox.mode()
    print(f"sandbox mode: {mode.name}" + (f" ({mode.reason})" if mode.reason else ""))
    times, cpu = await sandbox_times(sandbox)
    print(f"python_repl_tool, {RUNS} runs of print(1): {summary(times)}, "
          f"CPU median {statistics.median(cpu) * 1000:.1f} ms")
    print(f"bare interpreter, {RUNS} runs of print(1): {summary(bare_times())}")


if __name__ == "__main__":
    asyncio.run(main())
