"""The worker's Prometheus endpoint: the SDK's own metrics and ours, from one Temporal runtime.

Why the SDK's meter rather than prometheus_client: ``workflow.metric_meter()`` is replay-safe
(a replayed run is not counted again), ``activity.metric_meter()`` labels each series with the
namespace, task queue and activity type for free, and both land on the same endpoint as the
SDK's series (``temporal_*``: task latencies, poll and slot use, request failures), so there is
one port to scrape and no second registry. Counters are integers, hence the estimated cost in
millionths of a USD.

Off unless ``DEERFLOW_METRICS_ADDRESS`` is set: the worker then keeps the SDK's default runtime,
whose meter is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from config.settings import Settings
from runtime.logs import core_logging

# Our series, for the README and the tests (activity series also carry namespace, task_queue,
# activity_type and workflow_type labels; workflow series namespace, task_queue and workflow_type).
SERIES = {
    "deerflow_llm_calls": "model calls (attempts) by model, agent, outcome (ok, truncated, error)",
    "deerflow_llm_tokens": "tokens by model, agent, kind (prompt, completion)",
    "deerflow_llm_cost_microusd": "estimated cost in millionths of a USD by model, priced (true, false)",
    "deerflow_tool_calls": "tool calls (attempts) by tool (activity name, or mcp:<server>) and outcome",
    "deerflow_sandbox_runs": "python_repl_tool runs by outcome (ok, error, timeout, memory, cpu, output, refused)",
    "deerflow_crawl_bytes": "decoded bytes of fetched pages and PDFs",
    "deerflow_run_phases": "runs entering each phase",
    "deerflow_runs_ended": "runs ended by outcome (report, direct_reply, cancelled, failed)",
}


def metrics_runtime(settings: Settings, labels: Mapping[str, str] | None = None) -> Runtime | None:
    """A runtime serving ``/metrics`` on ``DEERFLOW_METRICS_ADDRESS``, or None when it is unset.

    ``labels`` go on every series (the worker's build: runtime/build_info.py). Bind it to a private
    address (or loopback): the endpoint has no authentication, and the labels show model names and
    task queues.
    """
    if not settings.metrics_address:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=settings.metrics_address),
                                             global_tags=dict(labels or {}), logging=core_logging(settings)))
