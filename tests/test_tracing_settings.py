"""The standard OpenTelemetry settings, and polling that does not flood the trace store (issue #22).

Why: a platform team's collector speaks OTLP over gRPC, wants a tenant header, names services and
samples; our exporter must follow ``OTEL_*`` as every other OTel program does. And a terminal or page
polling ``status`` once a second made one trace per poll, burying the runs' own traces.
Each case runs in a fresh process: OpenTelemetry allows one tracer provider per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from runtime.embedded import free_port
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.processes import REPO_DIR

EXPORT_ONE_SPAN = textwrap.dedent("""
    from opentelemetry import trace
    from config.settings import load_settings
    from runtime.shutdown import exit_now
    from runtime.tracing import tracing_interceptors
    assert tracing_interceptors(load_settings())
    trace.get_tracer("test").start_span("a span").end()
    exit_now(0)
""")


def run(script: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], env={"PATH": "/usr/bin:/bin", **env}, cwd=REPO_DIR,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that keeps what it was sent."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], trace_service_pb2.ExportTraceServiceRequest]] = []

    def Export(self, request, context):  # type: ignore[no-untyped-def]
        self.received.append((dict(context.invocation_metadata()), request))
        return trace_service_pb2.ExportTraceServiceResponse()


def test_grpc_protocol_headers_and_service_name_are_honoured() -> None:
    collector, port = Collector(), free_port()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        run(EXPORT_ONE_SPAN, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_EXPORTER_OTLP_HEADERS="x-tenant=research", OTEL_SERVICE_NAME="deerflow-api")
    finally:
        server.stop(grace=None)
    assert len(collector.received) == 1
    metadata, request = collector.received[0]
    assert metadata["x-tenant"] == "research"
    spans = request.resource_spans[0]
    attributes = {item.key: item.value.string_value for item in spans.resource.attributes}
    assert attributes["service.name"] == "deerflow-api"
    assert [span.name for scope in spans.scope_spans for span in scope.spans] == ["a span"]


def test_the_sampler_setting_is_honoured() -> None:
    with FakeHTTPServer(lambda _seen: Reply(200)) as collector:
        run(EXPORT_ONE_SPAN, OTEL_EXPORTER_OTLP_ENDPOINT=collector.base_url, OTEL_TRACES_SAMPLER="always_off")
        assert collector.requests == []
        run(EXPORT_ONE_SPAN, OTEL_EXPORTER_OTLP_ENDPOINT=collector.base_url, OTEL_TRACES_SAMPLER="always_on")
        assert [(seen.method, seen.path) for seen in collector.requests] == [("POST", "/v1/traces")]


POLL = textwrap.dedent("""
    import asyncio, json
    import temporalio.client
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from runtime.tracing import install_tracer_provider, tracing_interceptor

    exporter = InMemorySpanExporter()
    install_tracer_provider(SimpleSpanProcessor(exporter))

    class Server(temporalio.client.OutboundInterceptor):
        def __init__(self):
            pass
        async def query_workflow(self, input):
            return "status"

    client = tracing_interceptor().intercept_client(Server())
    query = temporalio.client.QueryWorkflowInput(id="run", run_id=None, query="status", args=[], reject_condition=None,
                                                 headers={}, ret_type=None, rpc_metadata={}, rpc_timeout=None)

    async def main():
        for _ in range(5):  # a terminal polling `status`
            await client.query_workflow(query)
        with trace.get_tracer("test").start_as_current_span("an operation"):
            await client.query_workflow(query)

    asyncio.run(main())
    print(json.dumps([(span.name, span.parent.span_id if span.parent else None, span.context.span_id)
                      for span in exporter.get_finished_spans()]))
""")


def test_polling_outside_a_span_makes_no_trace_and_a_query_inside_one_stays_under_it() -> None:
    spans = json.loads(run(POLL))
    names = [name for name, _, _ in spans]
    assert names == ["QueryWorkflow:status", "an operation"], names
    (_, parent, _), (_, _, operation) = spans
    assert parent == operation
