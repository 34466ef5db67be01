"""The counters' edge cases, without a server: failed model calls, unpriced models, sandbox
outcomes, crawl bytes, MCP labels, and the OTLP export that ``OTEL_EXPORTER_OTLP_ENDPOINT`` turns on.

Why a real runtime: the counters are read back from a Prometheus scrape of the SDK's own
``Runtime`` (as the worker serves it), so names, labels and values are checked as Prometheus
sees them. Each test uses its own task queue label, so tests sharing the runtime never mix.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.runtime import Runtime
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from activities.model.telemetry import model_call_telemetry
from activities.support.tool_metrics import ToolMetricsInterceptor, count_crawl_bytes
from config.settings import Settings, load_settings
from runtime.metrics import metrics_runtime
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.processes import free_port
from tests.support.prometheus_text import samples, scrape, total
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse
from workflows.contracts.tool_activities import MCPCallRequest, PythonResult
from workflows.contracts.usage import Usage

SETTINGS = load_settings({"MCP_SERVERS": '{"github": {"transport": "stdio", "command": "npx"}}'})


@pytest.fixture(scope="module")
def runtime() -> tuple[Runtime, str]:
    settings = Settings(DEERFLOW_METRICS_ADDRESS=f"127.0.0.1:{free_port()}")
    served = metrics_runtime(settings)
    assert served is not None and settings.metrics_address
    return served, settings.metrics_address


def environment(runtime: tuple[Runtime, str], activity_type: str) -> tuple[ActivityEnvironment, str]:
    """An activity context on the shared runtime, under a task queue no other test uses."""
    env = ActivityEnvironment()
    queue = f"q-{uuid.uuid4().hex[:8]}"
    env.info = dataclasses.replace(env.info, activity_type=activity_type, task_queue=queue)
    env.metric_meter = runtime[0].metric_meter
    return env, queue


class _Model:
    """Stands in for ModelActivities: an object with settings and a decorated model turn."""

    def __init__(self, settings: Settings, turn: Callable[[ChatRequest], Awaitable[ChatResponse]]) -> None:
        self.settings = settings
        self.turn = turn

    @model_call_telemetry
    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self.turn(request)


def request() -> ChatRequest:
    return ChatRequest(prompt="planner", messages=[ChatMessage(role="user", content="a private question")])


async def test_an_unpriced_model_counts_its_tokens_at_zero_cost_labelled_unpriced(runtime: tuple[Runtime, str]) -> None:
    async def reply(_: ChatRequest) -> ChatResponse:
        return ChatResponse(message=ChatMessage(role="assistant", content="ok"),
                            usage=Usage(llm_calls=1, input_tokens=120, output_tokens=30, total_tokens=150))

    env, queue = environment(runtime, "chat")
    model = _Model(Settings(BASIC_MODEL="my-own-model"), reply)
    await env.run(model.chat, request())
    text = scrape(runtime[1])
    assert total(text, "deerflow_llm_tokens", task_queue=queue, model="my-own-model", kind="prompt") == 120
    assert total(text, "deerflow_llm_tokens", task_queue=queue, kind="completion", agent="planner") == 30
    assert total(text, "deerflow_llm_calls", task_queue=queue, outcome="ok") == 1
    cost = [labels for labels, _ in samples(text, "deerflow_llm_cost_microusd") if labels["task_queue"] == queue]
    assert cost == [{**cost[0], "priced": "false", "model": "my-own-model"}]
    assert total(text, "deerflow_llm_cost_microusd", task_queue=queue) == 0


async def test_a_failed_model_call_is_counted_as_an_error_and_raised_unchanged(runtime: tuple[Runtime, str]) -> None:
    failure = ApplicationError("Model provider returned HTTP 401: bad key", type="ModelProviderError")

    async def refuse(_: ChatRequest) -> ChatResponse:
        raise failure

    env, queue = environment(runtime, "chat")
    with pytest.raises(ApplicationError) as raised:
        await env.run(_Model(SETTINGS, refuse).chat, request())
    assert raised.value is failure
    text = scrape(runtime[1])
    assert total(text, "deerflow_llm_calls", task_queue=queue, outcome="error", model="gpt-4o-mini") == 1
    assert total(text, "deerflow_llm_tokens", task_queue=queue) == 0


async def run_tool(env: ActivityEnvironment, result: Callable[[], Any], *args: Any) -> Any:
    """Run ``result`` as an activity behind the tool-metrics interceptor."""

    class Next(ActivityInboundInterceptor):
        def __init__(self) -> None:
            pass

        async def execute_activity(self, input: ExecuteActivityInput) -> Any:
            return result()

    inbound = ToolMetricsInterceptor(SETTINGS).intercept_activity(Next())

    async def call() -> Any:
        return await inbound.execute_activity(ExecuteActivityInput(fn=result, args=args, executor=None, headers={}))

    return await env.run(call)


@pytest.mark.parametrize(("result", "outcome"), [
    (PythonResult(exit_code=0), "ok"), (PythonResult(exit_code=1), "error"),
    (PythonResult(exit_code=None, stopped="timeout"), "timeout"),
])
async def test_sandbox_runs_are_counted_by_outcome(runtime: tuple[Runtime, str], result: PythonResult,
                                                   outcome: str) -> None:
    env, queue = environment(runtime, "python_repl_tool")
    await run_tool(env, lambda: result)
    text = scrape(runtime[1])
    assert total(text, "deerflow_sandbox_runs", task_queue=queue) == total(
        text, "deerflow_sandbox_runs", task_queue=queue, outcome=outcome) == 1
    assert total(text, "deerflow_tool_calls", task_queue=queue, tool="python_repl_tool", outcome="ok") == 1


async def test_a_refused_sandbox_run_is_a_failed_tool_call(runtime: tuple[Runtime, str]) -> None:
    def refuse() -> PythonResult:
        raise ApplicationError("python_repl_tool refuses to run code on this worker", type="SandboxError")

    env, queue = environment(runtime, "python_repl_tool")
    with pytest.raises(ApplicationError):
        await run_tool(env, refuse)
    text = scrape(runtime[1])
    assert total(text, "deerflow_sandbox_runs", task_queue=queue, outcome="refused") == 1
    assert total(text, "deerflow_tool_calls", task_queue=queue, outcome="error") == 1


async def test_mcp_calls_are_labelled_by_the_operators_server_only(runtime: tuple[Runtime, str]) -> None:
    env, queue = environment(runtime, "mcp_call_tool")
    await run_tool(env, lambda: None, MCPCallRequest(server_name="github", tool="search_code"))
    await run_tool(env, lambda: None, MCPCallRequest(server_name="attacker-chosen-name", tool="x"))
    text = scrape(runtime[1])
    assert total(text, "deerflow_tool_calls", task_queue=queue, tool="mcp:github") == 1
    assert total(text, "deerflow_tool_calls", task_queue=queue, tool="mcp_call_tool") == 1
    assert "attacker-chosen-name" not in text


async def test_activities_that_are_not_tools_are_not_counted_as_tools(runtime: tuple[Runtime, str]) -> None:
    env, queue = environment(runtime, "load_run_config")
    await run_tool(env, lambda: None)
    assert total(scrape(runtime[1]), "deerflow_tool_calls", task_queue=queue) == 0


async def test_crawl_bytes_add_up(runtime: tuple[Runtime, str]) -> None:
    env, queue = environment(runtime, "crawl_tool")

    async def crawl() -> None:
        count_crawl_bytes(1000)
        count_crawl_bytes(234)

    await env.run(crawl)
    assert total(scrape(runtime[1]), "deerflow_crawl_bytes", task_queue=queue) == 1234


def test_otlp_export_is_on_with_the_endpoint_and_flushed_at_exit() -> None:
    """The production path in a fresh process: the endpoint turns tracing on, and ``exit_now``
    (which skips the exporter's atexit hook) still delivers the spans to the collector."""
    with FakeHTTPServer(lambda _seen: Reply(200)) as collector:
        script = textwrap.dedent(f"""
            from opentelemetry import trace
            from config.settings import load_settings
            from runtime.shutdown import exit_now
            from runtime.tracing import tracing_interceptors
            settings = load_settings({{"OTEL_EXPORTER_OTLP_ENDPOINT": "{collector.base_url}"}})
            assert len(tracing_interceptors(settings)) == 1
            assert tracing_interceptors(settings) == tracing_interceptors(settings)  # set up once
            trace.get_tracer("test").start_span("a span").end()
            exit_now(0)
        """)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.base_url, "PATH": "/usr/bin:/bin"}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, done.stderr
    assert [(seen.method, seen.path) for seen in collector.requests] == [("POST", "/v1/traces")]
    assert b"a span" in collector.requests[0].body


