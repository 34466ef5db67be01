"""OpenTelemetry traces through the SDK's contrib ``TracingInterceptor``, exported over OTLP.

Why the interceptor on the client: a client's interceptors also apply to every worker built on it,
so one call in ``runtime.connection.connect`` gives the CLI and the API server a span for the start
(the root of the run's trace) and the worker ``RunWorkflow``/``StartActivity``/``RunActivity``
spans under it. The trace context travels in Temporal headers, so the trace survives worker
restarts; the workflow's own spans are the interceptor's replay-safe zero-length ones.

Tracing is on only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Off, this module imports nothing
from OpenTelemetry's SDK and adds no interceptor, so it costs nothing. The exporter is chosen by
``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` (``http/protobuf`` or ``grpc``) and reads the other standard
``OTEL_EXPORTER_OTLP_*`` variables (headers, timeout) itself; the SDK's provider reads
``OTEL_TRACES_SAMPLER`` and ``OTEL_RESOURCE_ATTRIBUTES``; the ``OTEL_SERVICE_NAME`` setting names the
service (default ``deerflow-temporal``).

A query made outside any span (``status``, ``watch`` and the page poll every second or so) is not
traced: each would otherwise be a trace of its own and bury the runs' traces. A query made inside a
traced operation still is, under it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from config.groups.telemetry import SERVICE_NAME
from config.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from temporalio.contrib.opentelemetry import TracingInterceptor

def install_tracer_provider(processor: SpanProcessor, service_name: str = SERVICE_NAME) -> TracerProvider:
    """Make an SDK tracer provider sending spans to ``processor`` the process's global one.

    OpenTelemetry allows one global provider per process (a second ``set_tracer_provider`` is
    ignored with a warning), which is also what the contrib interceptor and the model-call spans
    (activities/model/telemetry.py) use; tests install theirs with an in-memory exporter, and shut
    the returned provider down when done.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.name": service_name})
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
    import temporalio.client
    from opentelemetry import trace
    from temporalio.contrib.opentelemetry import TracingInterceptor

    class QueriesUnderTheirCaller(temporalio.client.OutboundInterceptor):
        """Queries traced only inside a span: a poll outside one would be a new trace each time."""

        def __init__(self, traced: temporalio.client.OutboundInterceptor,
                     untraced: temporalio.client.OutboundInterceptor) -> None:
            super().__init__(traced)
            self.untraced = untraced

        async def query_workflow(self, input: temporalio.client.QueryWorkflowInput) -> Any:
            if trace.get_current_span().get_span_context().is_valid:
                return await super().query_workflow(input)
            return await self.untraced.query_workflow(input)

    class Interceptor(TracingInterceptor):
        def intercept_client(
                self, next: temporalio.client.OutboundInterceptor) -> temporalio.client.OutboundInterceptor:
            return QueriesUnderTheirCaller(super().intercept_client(next), next)

    return Interceptor(always_create_workflow_spans=True)


def span_exporter(settings: Settings) -> SpanExporter:
    """The OTLP exporter for the configured protocol; it reads the endpoint, headers and timeout itself."""
    if (settings.otel_exporter_otlp_traces_protocol or settings.otel_exporter_otlp_protocol) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


_interceptors: list[TracingInterceptor] = []  # the process's one interceptor, once tracing is set up


def tracing_interceptors(settings: Settings) -> list[TracingInterceptor]:
    """``[the interceptor]`` when ``settings`` enable OTLP export (set up once per process), else ``[]``."""
    if not settings.otel_exporter_otlp_endpoint:
        return []
    if not _interceptors:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        install_tracer_provider(BatchSpanProcessor(span_exporter(settings)), settings.otel_service_name)
        _interceptors.append(tracing_interceptor())
    return list(_interceptors)


def flush_traces(timeout_millis: int = 5000) -> None:
    """Export the spans still queued. ``exit_now`` skips the atexit hook that would, so it calls this."""
    if _interceptors:
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush(timeout_millis)
