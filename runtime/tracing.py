"""OpenTelemetry traces through the SDK's contrib ``TracingInterceptor``, exported over OTLP.

Why the interceptor on the client: a client's interceptors also apply to every worker built on it,
so one call in ``runtime.connection.connect`` gives the CLI and the API server a span for the start
(the root of the run's trace) and the worker ``RunWorkflow``/``StartActivity``/``RunActivity``
spans under it. The trace context travels in Temporal headers, so the trace survives worker
restarts; the workflow's own spans are the interceptor's replay-safe zero-length ones.

Tracing is on only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Off, this module imports nothing
from OpenTelemetry's SDK and adds no interceptor, so it costs nothing. The exporter reads the
standard ``OTEL_*`` variables (headers, protocol, timeout) itself; ``OTEL_SERVICE_NAME`` names the
service (default ``deerflow-temporal``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from config.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from temporalio.contrib.opentelemetry import TracingInterceptor

SERVICE_NAME = "deerflow-temporal"


def install_tracer_provider(processor: SpanProcessor) -> TracerProvider:
    """Make an SDK tracer provider sending spans to ``processor`` the process's global one.

    OpenTelemetry allows one global provider per process (a second ``set_tracer_provider`` is
    ignored with a warning), which is also what the contrib interceptor and the model-call spans
    (activities/model_telemetry.py) use; tests install theirs with an in-memory exporter, and shut
    the returned provider down when done.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider


def tracing_interceptor() -> TracingInterceptor:
    """The contrib interceptor, on the global tracer provider.

    Why the stable ``TracingInterceptor`` and not the experimental ``OpenTelemetryPlugin``: its
    spans are exported as they happen, so a run paused for days at review already shows its trace,
    and no span waits in a worker's memory for a run that may be evicted or move to another worker.
    ``always_create_workflow_spans``: a run started without a traced client (the ``temporal`` CLI,
    the Web UI) still gets one trace, rooted at its workflow span.
    """
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return TracingInterceptor(always_create_workflow_spans=True)


_interceptors: list[TracingInterceptor] = []  # the process's one interceptor, once tracing is set up


def tracing_interceptors(settings: Settings) -> list[TracingInterceptor]:
    """``[the interceptor]`` when ``settings`` enable OTLP export (set up once per process), else ``[]``."""
    if not settings.otel_exporter_otlp_endpoint:
        return []
    if not _interceptors:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        install_tracer_provider(BatchSpanProcessor(OTLPSpanExporter()))
        _interceptors.append(tracing_interceptor())
    return list(_interceptors)


def flush_traces(timeout_millis: int = 5000) -> None:
    """Export the spans still queued. ``exit_now`` skips the atexit hook that would, so it calls this."""
    if _interceptors:
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush(timeout_millis)
