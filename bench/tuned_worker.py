"""``worker.py`` with Worker knobs read from env: a scratch copy for benchmarks, never used by the product.

Why: ``worker.py`` builds its ``Worker`` with the SDK defaults and exposes no tuning. To measure
what a knob would buy before proposing it, this script runs the product's ``worker.main``
unchanged except that every ``Worker(...)`` it builds gets extra keyword arguments:

* ``BENCH_MAX_WORKFLOW_TASK_POLLS`` / ``BENCH_MAX_ACTIVITY_TASK_POLLS`` -> poller maxima (default 5 / 5)
* ``BENCH_UNSANDBOXED=1`` -> ``workflow_runner=UnsandboxedWorkflowRunner()``
* ``BENCH_DISABLE_EAGER_ACTIVITIES=1`` -> ``disable_eager_activity_execution=True``
* ``BENCH_METRICS_PORT`` -> a Prometheus endpoint on 127.0.0.1 (e.g. ``temporal_sticky_cache_size``)
* ``BENCH_RESOURCE_TUNER=<cpu target>`` -> the SDK's resource-based tuner (memory target 0.9) in place
  of the product's fixed activity slots per queue
* ``BENCH_NICE`` -> the worker's niceness, set before it starts a thread (``bench/starved_worker.py``)

The cache size and sandbox concurrency are no longer knobs here: they are the product's
``DEERFLOW_MAX_CACHED_WORKFLOWS`` and ``DEERFLOW_SANDBOX_QUEUE_CONCURRENCY`` (a knob would be
overridden by the value the product passes).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerTuner

import worker
from hosting import registry
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


def tuned_worker(*args: Any, **kwargs: Any) -> Worker:
    """``Worker`` with the knobs; the resource-based tuner replaces the fixed activity slots."""
    if os.environ.get("BENCH_RESOURCE_TUNER"):
        kwargs.pop("max_concurrent_activities", None)
        kwargs["tuner"] = WorkerTuner.create_resource_based(
            target_memory_usage=0.9, target_cpu_usage=float(os.environ["BENCH_RESOURCE_TUNER"]))
    return Worker(*args, **{**kwargs, **knobs()})


if __name__ == "__main__":
    os.nice(int(os.environ.get("BENCH_NICE", "0")))
    if os.environ.get("BENCH_METRICS_PORT"):
        metrics = PrometheusConfig(bind_address=f"127.0.0.1:{os.environ['BENCH_METRICS_PORT']}")
        Runtime.set_default(Runtime(telemetry=TelemetryConfig(metrics=metrics)))
    registry.Worker = tuned_worker  # type: ignore[misc,assignment]
    asyncio.run(worker.main())
    exit_now(0)
