"""Traces and metrics of one real run: the offline model on a time-skipping server of its own.

Why one run for both: a run takes seconds on two shared cores, and the span tree and the counters
describe the same run, so each is checked against the run's history and result. The spans go to
an in-memory exporter installed as the process's tracer provider, as ``runtime.tracing`` installs
the OTLP one; the counters are read by scraping the Prometheus endpoint the worker's runtime opens,
as Prometheus would.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from activities.guards.secret_scrubber import SecretScrubber
from activities.support.tool_metrics import TOOLS, ToolMetricsInterceptor
from config.model_prices import LIST_SOURCE, OPERATOR_SOURCE, ModelPrice, default_price
from config.settings import Settings, load_settings
from hosting.registry import build_workers, running
from hosting.scrub_interceptor import SecretScrubbingInterceptor
from offline.model_server import FakeModelServer
from runtime.converter import data_converter
from runtime.metrics import metrics_runtime
from runtime.tracing import install_tracer_provider, tracing_interceptor
from tests.support.chat_requests import probe_requests
from tests.support.processes import TEST_SERVER, free_port
from tests.support.prometheus_text import scrape, total
from tests.support.runs import QUESTION, run_id
from tests.support.settings import settings_with
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.usage import PriceQuote, call_usage

# Whole numbers of USD per million tokens: each call's cost in micro-USD is then exact.
PRICES = {"input": 1, "output": 2}
API_KEY = "sk-telemetry-test-key-0123456789"


@dataclass
class TracedRun:
    result: ResearchResult
    history: WorkflowHistory
    spans: list[ReadableSpan]
    metrics: str
    model: str
    requests: list[dict[str, Any]]  # the chat request bodies the fake model received during the run


@pytest.fixture(scope="module")
async def traced_run(provider_env: dict[str, str], model_server: FakeModelServer) -> AsyncIterator[TracedRun]:
    exporter = InMemorySpanExporter()
    provider = install_tracer_provider(SimpleSpanProcessor(exporter))
    settings = settings_with(provider_env, DEERFLOW_MODEL_PRICES=json.dumps({"deerflow-offline-demo": PRICES}),
                             DEERFLOW_METRICS_ADDRESS=f"127.0.0.1:{free_port()}", OPENAI_API_KEY=API_KEY)
    runtime = metrics_runtime(settings)
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(settings), test_server_existing_path=TEST_SERVER, runtime=runtime,
        interceptors=[tracing_interceptor()])
    interceptors = [SecretScrubbingInterceptor(SecretScrubber.for_settings(settings)), ToolMetricsInterceptor(settings)]
    try:
        async with running(build_workers(env.client, settings, interceptors=interceptors)):
            request, before = ResearchRequest(question=QUESTION, auto_accept_plan=True), len(model_server.requests)
            handle = await env.client.start_workflow(WORKFLOW_TYPE, request, id=run_id("telemetry"),
                                                     task_queue=TASK_QUEUE, result_type=ResearchResult)
            result = await handle.result()
            history = await handle.fetch_history()
            metrics = scrape(settings.metrics_address)
        yield TracedRun(result, history, list(exporter.get_finished_spans()), metrics, settings.model_name("basic"),
                        model_server.requests[before:])
    finally:
        provider.shutdown()  # the later tests' model calls then make no-op spans
        await env.shutdown()


def scheduled(history: WorkflowHistory) -> Counter[str]:
    """How many times each activity type was scheduled in the run."""
    return Counter(event.activity_task_scheduled_event_attributes.activity_type.name for event in history.events
                   if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)


def test_one_trace_runs_from_the_client_start_to_each_model_call(traced_run: TracedRun) -> None:
    spans = traced_run.spans
    by_id = {span.context.span_id: span for span in spans}
    roots = [span for span in spans if span.name == f"StartWorkflow:{WORKFLOW_TYPE}"]
    assert len(roots) == 1 and roots[0].parent is None
    trace_id = roots[0].context.trace_id
    assert {span.context.trace_id for span in spans} == {trace_id}, "one trace per run"

    def parent(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, f"{span.name} has no parent"
        return by_id[span.parent.span_id]

    # The contrib interceptor's workflow spans are zero-length and carry the client's context, so
    # the workflow run and each activity it schedules are children of the client's start span.
    runs = [span for span in spans if span.name == f"RunWorkflow:{WORKFLOW_TYPE}"]
    assert len(runs) == 1 and parent(runs[0]) is roots[0]
    activities = scheduled(traced_run.history)
    for name, count in activities.items():
        executions = [span for span in spans if span.name == f"RunActivity:{name}"]
        assert len(executions) == count, name
        for span in executions:
            assert parent(span).name == f"StartActivity:{name}" and parent(parent(span)) is roots[0]

    model_calls = [span for span in spans if span.name == f"chat {traced_run.model}"]
    assert len(model_calls) == activities["chat"] >= 7
    usage = traced_run.result.usage
    assert sum(span.attributes["gen_ai.usage.input_tokens"] for span in model_calls) == usage.input_tokens
    assert sum(span.attributes["gen_ai.usage.output_tokens"] for span in model_calls) == usage.output_tokens
    for span in model_calls:
        assert parent(span).name == "RunActivity:chat"
        assert span.attributes["gen_ai.request.model"] == traced_run.model
        assert span.attributes["temporal.activity.attempt"] == 1
        assert span.attributes["deerflow.agent"] in {"coordinator", "planner", "researcher", "coder", "reporter"}


def test_no_span_attribute_carries_the_question_the_report_or_a_key(traced_run: TracedRun) -> None:
    values = [str(value) for span in traced_run.spans for value in (span.attributes or {}).values()]
    title = traced_run.result.report.splitlines()[0].lstrip("# ")
    assert values and len(title) > 20
    assert not [value for value in values if "solid-state" in value or title in value or API_KEY in value]


def test_a_scrape_after_the_run_counts_its_model_calls_tokens_cost_and_tools(traced_run: TracedRun) -> None:
    text, usage, model = traced_run.metrics, traced_run.result.usage, traced_run.model
    activities = scheduled(traced_run.history)
    # Every call the run made counts, the tool-support probe's too; the probe rides in a turn's activity.
    requests = traced_run.requests
    assert total(text, "deerflow_llm_calls", model=model, outcome="ok") == usage.llm_calls == len(requests)
    assert activities["chat"] == len(requests) - len(probe_requests(requests))
    assert total(text, "deerflow_llm_tokens", model=model, kind="prompt") == usage.input_tokens > 0
    assert total(text, "deerflow_llm_tokens", model=model, kind="completion") == usage.output_tokens > 0
    expected_cost = usage.input_tokens * PRICES["input"] + usage.output_tokens * PRICES["output"]
    assert total(text, "deerflow_llm_cost_microusd", model=model, priced="true") == expected_cost
    assert round(usage.cost_usd * 1_000_000) == expected_cost, "the run's cost is the metric's"
    assert usage.by_model[model].price is not None and usage.by_model[model].price.source == "DEERFLOW_MODEL_PRICES"
    tools = {name: count for name, count in activities.items() if name in TOOLS}
    assert tools.get("web_search")
    for name, count in tools.items():
        assert total(text, "deerflow_tool_calls", tool=name) == count, name
    assert total(text, "deerflow_sandbox_runs") == tools.get("python_repl_tool", 0)
    assert (total(text, "deerflow_crawl_bytes") > 0) == bool(tools.get("crawl_tool"))
    assert total(text, "deerflow_runs_ended", outcome="report") == 1
    assert total(text, "deerflow_runs_ended") == 1
    for phase in ("coordinating", "planning", "researching", "reporting", "completed"):
        assert total(text, "deerflow_run_phases", phase=phase) >= 1, phase
    assert any(line.startswith("temporal_") for line in text.splitlines()), "the SDK's own series are served too"


def test_prices_come_from_the_operator_then_the_defaults_and_unknown_models_are_unpriced() -> None:
    operator = load_settings({"DEERFLOW_MODEL_PRICES": '{"gpt-4o": {"input": 1, "output": 1}}'})
    assert operator.price_quote("gpt-4o") == PriceQuote(input=1, cached_input=1, output=1, source=OPERATOR_SOURCE)
    listed = default_price("gpt-4o-mini")
    assert listed is not None and operator.price_quote("openai/gpt-4o-mini") == listed.quote(LIST_SOURCE)
    assert Settings().price_quote("my-own-model") is None


def test_a_call_costs_its_fresh_input_cached_input_and_output_at_their_prices() -> None:
    price = ModelPrice(input=2, output=8, cached_input=0.5).quote(OPERATOR_SOURCE)
    usage = call_usage("m", price, input_tokens=1_000, cached_input_tokens=400, output_tokens=100, total_tokens=1_100)
    assert usage.cost_usd == (600 * 2 + 400 * 0.5 + 100 * 8) / 1_000_000
    unpriced = call_usage("free", None, 10, 0, 5, 15)
    usage.add(unpriced)
    assert usage.total_tokens == 1_115 and usage.cost_usd == 0.0022 and usage.unpriced_models == ["free"]


def test_telemetry_is_off_without_its_settings() -> None:
    from runtime.tracing import tracing_interceptors

    settings = Settings()
    assert metrics_runtime(settings) is None
    assert tracing_interceptors(settings) == []
