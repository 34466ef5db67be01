"""``worker.py`` with Worker knobs read from env: a scratch copy for benchmarks, never used by the product.

Why: ``worker.py`` builds its ``Worker`` with the SDK defaults and exposes no tuning. To measure
what a knob would buy before proposing it, this script runs the product's ``worker.main``
unchanged except that every ``Worker(...)`` it builds gets extra keyword arguments:

* ``BENCH_MAX_WORKFLOW_TASK_POLLS`` / ``BENCH_MAX_ACTIVITY_TASK_POLLS`` -> poller maxima (default 5 / 5)
* ``BENCH_UNSANDBOXED=1`` -> ``workflow_runner=UnsandboxedWorkflowRunner()``
* ``BENCH_DISABLE_EAGER_ACTIVITIES=1`` -> ``disable_eager_activity_execution=True``
* ``BENCH_METRICS_PORT`` -> a Prometheus endpoint on 127.0.0.1 (e.g. ``temporal_sticky_cache_size``)

The cache size and sandbox concurrency are no longer knobs here: they are the product's
``DEERFLOW_MAX_CACHED_WORKFLOWS`` and ``DEERFLOW_SANDBOX_QUEUE_CONCURRENCY`` (a knob would be
overridden by the value the product passes).
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import worker
from activities import registry
from runtime.shutdown import exit_now


def knobs() -> dict[str, Any]:
    """The extra ``Worker`` keyword arguments the environment asks for."""
    extra: dict[str, Any] = {}
    if os.environ.get("BENCH_MAX_WORKFLOW_TASK_POLLS"):
        extra["max_concurrent_workflow_task_polls"] = int(os.environ["BENCH_MAX_WORKFLOW_TASK_POLLS"])
    if os.environ.get("BENCH_MAX_ACTIVITY_TASK_POLLS"):
        extra["max_concurrent_activity_task_polls"] = int(os.environ["BENCH_MAX_ACTIVITY_TASK_POLLS"])
    if os.environ.get("BENCH_UNSANDBOXED") == "1":
        extra["workflow_runner"] = UnsandboxedWorkflowRunner()
    if os.environ.get("BENCH_DISABLE_EAGER_ACTIVITIES") == "1":
        extra["disable_eager_activity_execution"] = True
    return extra


if __name__ == "__main__":
    if os.environ.get("BENCH_METRICS_PORT"):
        metrics = PrometheusConfig(bind_address=f"127.0.0.1:{os.environ['BENCH_METRICS_PORT']}")
        Runtime.set_default(Runtime(telemetry=TelemetryConfig(metrics=metrics)))
    registry.Worker = functools.partial(Worker, **knobs())  # type: ignore[misc]
    asyncio.run(worker.main())
    exit_now(0)
