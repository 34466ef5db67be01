"""``worker.py`` with Worker knobs read from env: a scratch copy for benchmarks, never used by the product.

Why: ``worker.py`` builds its ``Worker`` with the SDK defaults and exposes no tuning. To measure
what a knob would buy before proposing it, this script runs the product's ``worker.main``
unchanged except that ``Worker(...)`` gets extra keyword arguments:

* ``BENCH_MAX_CACHED_WORKFLOWS`` -> ``max_cached_workflows`` (SDK default 1000)
* ``BENCH_MAX_WORKFLOW_TASK_POLLS`` / ``BENCH_MAX_ACTIVITY_TASK_POLLS`` -> poller maxima (default 5 / 5)
* ``BENCH_UNSANDBOXED=1`` -> ``workflow_runner=UnsandboxedWorkflowRunner()``
* ``BENCH_DISABLE_EAGER_ACTIVITIES=1`` -> ``disable_eager_activity_execution=True``
* ``BENCH_METRICS_PORT`` -> a Prometheus endpoint on 127.0.0.1 (e.g. ``temporal_sticky_cache_size``)
* ``BENCH_PYTHON_MAX_CONCURRENCY`` -> at most that many ``python_repl_tool`` sandboxes at once (the
  proposed ``PYTHON_MAX_CONCURRENCY``; extra calls wait, heartbeating, like the other provider limits)
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio import activity
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import worker
from activities.heartbeat import heartbeating
from runtime.shutdown import exit_now
from sandbox.activity import SandboxActivities
from workflows.models import PythonRequest, PythonResult


def knobs() -> dict[str, Any]:
    """The extra ``Worker`` keyword arguments the environment asks for."""
    extra: dict[str, Any] = {}
    if os.environ.get("BENCH_MAX_CACHED_WORKFLOWS"):
        extra["max_cached_workflows"] = int(os.environ["BENCH_MAX_CACHED_WORKFLOWS"])
    if os.environ.get("BENCH_MAX_WORKFLOW_TASK_POLLS"):
        extra["max_concurrent_workflow_task_polls"] = int(os.environ["BENCH_MAX_WORKFLOW_TASK_POLLS"])
    if os.environ.get("BENCH_MAX_ACTIVITY_TASK_POLLS"):
        extra["max_concurrent_activity_task_polls"] = int(os.environ["BENCH_MAX_ACTIVITY_TASK_POLLS"])
    if os.environ.get("BENCH_UNSANDBOXED") == "1":
        extra["workflow_runner"] = UnsandboxedWorkflowRunner()
    if os.environ.get("BENCH_DISABLE_EAGER_ACTIVITIES") == "1":
        extra["disable_eager_activity_execution"] = True
    return extra


def limit_python_sandboxes(limit: int) -> None:
    """Make the worker's sandbox one whose python_repl_tool lets ``limit`` sandboxes run at once."""
    gate = asyncio.Semaphore(limit)

    class LimitedSandbox(SandboxActivities):
        @activity.defn(name="python_repl_tool")
        @heartbeating
        async def python_repl_tool(self, request: PythonRequest) -> PythonResult:
            async with gate:
                return await SandboxActivities.python_repl_tool(self, request)

    worker.SandboxActivities = LimitedSandbox  # type: ignore[misc]


if __name__ == "__main__":
    if os.environ.get("BENCH_PYTHON_MAX_CONCURRENCY"):
        limit_python_sandboxes(int(os.environ["BENCH_PYTHON_MAX_CONCURRENCY"]))
    if os.environ.get("BENCH_METRICS_PORT"):
        metrics = PrometheusConfig(bind_address=f"127.0.0.1:{os.environ['BENCH_METRICS_PORT']}")
        Runtime.set_default(Runtime(telemetry=TelemetryConfig(metrics=metrics)))
    worker.Worker = functools.partial(Worker, **knobs())  # type: ignore[misc]
    asyncio.run(worker.main())
    exit_now(0)
