"""The table of activity options, the heartbeat interval derived from it, and the timeline summaries.

Summaries are read back from real histories: a whole research run on the time-skipping server
with the real activities, and an agent step whose activities are fakes registered under the real
names (so the step number, the sandbox queue, an MCP tool and hostile tool arguments can be set).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.model import chat as chat_activity
from activities.support.retry_pacing import paced_retries
from config.settings import Settings
from runtime.heartbeat import heartbeat_interval, heartbeating
from tests.support.runs import start
from workflows.calls.activity_options import (
    ACTIVITY_OPTIONS,
    CHAT,
    HEARTBEAT_THROTTLE,
    HEARTBEAT_TIMEOUT,
    LOST_ATTEMPT_RETRY,
    QUICK_HEARTBEAT_TIMEOUT,
    SUMMARY_MAX_CHARS,
    WEB_SEARCH,
    summary_text,
)
from workflows.calls.queues import queue_name
from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ToolCall
from workflows.contracts.evaluation import MeasureRequest
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.mcp_choices import MCPServerChoice
from workflows.contracts.podcast import SpeechRequest
from workflows.contracts.research import Outcome
from workflows.contracts.slides import Deck, Slide
from workflows.contracts.tool_activities import (
    CrawlRequest,
    CrawlResult,
    LocalSearchRequest,
    MCPCallRequest,
    MCPCallResult,
    MCPListRequest,
    PythonRequest,
    PythonResult,
    SearchRequest,
    SearchResponse,
)
from workflows.contracts.usage import Usage
from workflows.research.agent_loop import run_agent
from workflows.research.agents import AgentSpec
from workflows.research.found_urls import FoundUrls
from workflows.research.tools import ToolContext

SAMPLE_INPUTS: dict[str, Any] = {
    "chat": ChatRequest(prompt="planner", messages=[]),
    "web_search": SearchRequest(query="solid-state batteries"),
    "local_search_tool": LocalSearchRequest(query="fleet trial"),
    "crawl_tool": CrawlRequest(url="https://example.org/a"),
    "python_repl_tool": PythonRequest(code="print(1)"),
    "mcp_list_tools": MCPListRequest(server_name="github", agent="researcher"),
    "mcp_call_tool": MCPCallRequest(server_name="github", tool="search_code"),
    "render_slides": Deck(title="Tides", slides=[Slide(title="Why", bullets=["Predictable"])]),
    "speak": SpeechRequest(text="Hello Deer", speaker="female"),
    "join_audio": [ArtefactRef(size=1, inline=b"x")],
    "measure_report": MeasureRequest(report="# Tides", style="news"),
    "load_run_config": [],
    "cancel_itself": "The run was cancelled at its token budget (7,000 tokens): a person cancelled it.",
    "read_fork_source": ForkPoint(workflow_id="research-solid-state-1a2b3c", stage=ForkStage.STEP, step=2),
}


def summaries(history: WorkflowHistory, client: Client) -> list[tuple[str, str]]:
    """(activity type, summary) of every activity the run scheduled, in order."""
    converter = client.data_converter.payload_converter
    return [
        (event.activity_task_scheduled_event_attributes.activity_type.name,
         converter.from_payload(event.user_metadata.summary, str))
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


# ------------------------------------------------------------------------------ the table


def test_every_kind_has_every_option() -> None:
    assert set(ACTIVITY_OPTIONS) == set(SAMPLE_INPUTS)
    for name, options in ACTIVITY_OPTIONS.items():
        assert options.name == name
        assert options.start_to_close > timedelta(0)
        assert options.schedule_to_close is None or options.schedule_to_close > options.start_to_close
        assert options.retry is None or isinstance(options.retry, RetryPolicy)
        summary = options.summary(SAMPLE_INPUTS[name])
        assert summary and "\n" not in summary and len(summary) <= 2 * SUMMARY_MAX_CHARS
        if options.heartbeat_timeout is not None:
            # Several beats fit in one timeout, so one late beat does not lose the activity.
            assert heartbeat_interval(options.heartbeat_timeout) * 3 <= options.heartbeat_timeout.total_seconds()
            # The server sees a beat at least once per the worker's throttle (the SDK's: 80% of the
            # timeout, capped by the worker's), so a live call survives an event-loop stall of 2 s or more.
            seen_every = max(heartbeat_interval(options.heartbeat_timeout),
                             min(0.8 * options.heartbeat_timeout, HEARTBEAT_THROTTLE).total_seconds())
            assert options.heartbeat_timeout.total_seconds() - seen_every >= 2.0
        if options.provider_attempts is not None:
            # Lost attempts are bounded by the operator's retry window alone: no count, no deadline.
            assert options.retry is not None and options.retry.maximum_attempts == 0
            assert options.schedule_to_close is None and options.provider_attempts >= 2
        if options.failure_backoff is not None:
            # Only a lost attempt is retried at once; the policy's later intervals still grow.
            assert options.retry is not None and options.retry.initial_interval == LOST_ATTEMPT_RETRY


def test_model_calls_and_searches_are_given_up_quickly_and_failures_keep_their_back_off() -> None:
    assert CHAT.heartbeat_timeout == WEB_SEARCH.heartbeat_timeout == QUICK_HEARTBEAT_TIMEOUT
    assert CHAT.failure_backoff is not None and WEB_SEARCH.failure_backoff is not None
    # The schedules these kinds had before lost attempts were split off.
    assert [CHAT.failure_backoff.delay(attempt).total_seconds() for attempt in range(1, 7)] == [2, 4, 8, 16, 32, 60]
    assert [WEB_SEARCH.failure_backoff.delay(attempt).total_seconds() for attempt in range(1, 5)] == [1, 2, 4, 8]


def _attempt(activity_type: str, attempt: int) -> ActivityEnvironment:
    environment = ActivityEnvironment()
    environment.info = replace(ActivityEnvironment.default_info(), activity_type=activity_type, attempt=attempt)
    return environment


@pytest.mark.parametrize(("raised", "delay"), [
    (ApplicationError("HTTP 503", type="ModelProviderUnavailable"), timedelta(seconds=8)),
    (RuntimeError("surprise"), timedelta(seconds=8)),
    (ApplicationError("429", type="ModelProviderUnavailable", next_retry_delay=timedelta(seconds=30)),
     timedelta(seconds=30)),  # the provider's Retry-After wins
    (ApplicationError("bad request", type="ModelProviderError", non_retryable=True), None),
])
async def test_a_raised_failure_waits_its_kinds_back_off(raised: Exception, delay: timedelta | None) -> None:
    @paced_retries
    async def chat() -> None:
        raise raised

    with pytest.raises(Exception) as caught:
        await _attempt("chat", 3).run(chat)
    error = caught.value
    assert isinstance(error, ApplicationError), "reported as the SDK would, with the delay"
    assert error.next_retry_delay == delay
    assert error.type == (raised.type if isinstance(raised, ApplicationError) else "RuntimeError")
    assert error.non_retryable == (delay is None)
    assert str(raised) in str(error)


@pytest.mark.parametrize(("earlier", "final", "beat"), [
    ([], False, [(1,)]), ([4], False, [(5,)]), ([5], True, []),  # the 6th of chat's 6 is final
    (["junk"], False, [(1,)]),  # details it did not write count as none
])
async def test_the_providers_failures_are_counted_across_attempts_and_the_last_is_final(
        earlier: list[Any], final: bool, beat: list[tuple[int]]) -> None:
    """The count comes from the heartbeat details the attempt started with and leaves in a beat."""
    raised = ApplicationError("HTTP 503: overloaded", type="ModelProviderUnavailable")

    @paced_retries
    async def chat() -> None:
        raise raised

    environment = _attempt("chat", 9)  # attempts lost with their workers count for nothing
    environment.info = replace(environment.info, heartbeat_details=earlier)
    beats: list[Any] = []
    environment.on_heartbeat = lambda *details: beats.append(details)
    with pytest.raises(ApplicationError) as caught:
        await environment.run(chat)
    assert caught.value.non_retryable == final
    assert (caught.value.message, caught.value.type) == (raised.message, raised.type)
    assert beats == beat


async def test_a_kind_without_a_failure_back_off_raises_as_it_would() -> None:
    raised = ApplicationError("unreachable", type="CrawlUnavailable")

    @paced_retries
    async def crawl_tool() -> None:
        raise raised

    with pytest.raises(ApplicationError) as caught:
        await _attempt("crawl_tool", 1).run(crawl_tool)
    assert caught.value is raised and caught.value.next_retry_delay is None


async def test_a_model_call_beats_while_the_model_libraries_are_imported(
        monkeypatch: pytest.MonkeyPatch, worker_settings: Settings) -> None:
    """A replacement worker may still be importing them when the retried call arrives."""
    beats: list[Any] = []

    class Model:
        def __init__(self, _settings: object) -> None:
            self.settings = _settings

        async def chat(self, _request: ChatRequest) -> ChatResponse:
            return ChatResponse(message=ChatMessage(role="assistant", content="ok"), usage=Usage())

    async def slow_import(_name: str) -> Any:
        await asyncio.sleep(1.3)
        assert len(beats) >= 2, "no beat while the import ran"
        return type("llm", (), {"ModelActivities": Model})

    monkeypatch.setattr(chat_activity, "load", slow_import)
    environment = _attempt("chat", 1)
    environment.info = replace(environment.info, heartbeat_timeout=QUICK_HEARTBEAT_TIMEOUT)
    environment.on_heartbeat = lambda *details: beats.append(details)
    activity_object = chat_activity.ChatActivity(worker_settings)
    response = await environment.run(activity_object.chat, ChatRequest(prompt="planner", messages=[]))
    assert response.message.content == "ok"


async def test_a_model_call_lost_with_its_worker_counts_in_the_next_attempts_usage(
        monkeypatch: pytest.MonkeyPatch, worker_settings: Settings) -> None:
    """Issue #24: every call a run made counts, whatever the outcome. A worker killed mid-call cannot
    say what the call spent, so its beats said beforehand that a call was in flight; the retry on
    another worker adds that call to its own usage (the provider may have billed it)."""
    beats: list[Any] = []
    lost = asyncio.Event()

    class Model:
        def __init__(self, _settings: object) -> None:
            self.settings = _settings

        async def chat(self, _request: ChatRequest) -> ChatResponse:
            if not lost.is_set():
                lost.set()
                await asyncio.sleep(60)  # the worker dies in here
            return ChatResponse(message=ChatMessage(role="assistant", content="ok"), usage=Usage(llm_calls=1))

    async def imported(_name: str) -> Any:
        return type("llm", (), {"ModelActivities": Model})

    monkeypatch.setattr(chat_activity, "load", imported)
    request = ChatRequest(prompt="planner", messages=[])
    first = _attempt("chat", 1)
    first.info = replace(first.info, heartbeat_details=[1, Usage(llm_calls=2).model_dump()])  # an earlier failure
    first.on_heartbeat = lambda *details: beats.append(details)
    attempt = asyncio.create_task(first.run(chat_activity.ChatActivity(worker_settings).chat, request))
    await lost.wait()
    attempt.cancel()  # what the server keeps of a lost attempt: its last beat
    failures, carried = beats[-1]
    assert failures == 1 and carried.llm_calls == 3

    retry = _attempt("chat", 2)
    retry.info = replace(retry.info, heartbeat_details=[failures, carried.model_dump()])  # as the server hands them
    warm = chat_activity.ChatActivity(worker_settings)
    response = await retry.run(warm.chat, request)
    assert response.usage.llm_calls == 4  # the two failed calls, the lost one and its own

    # On a warm worker the in-flight beat is the attempt's first, which the SDK sends at once (later
    # beats wait for its throttle), so even a worker killed right after the request left has said so.
    next_call = _attempt("chat", 1)
    next_beats: list[Any] = []
    next_call.on_heartbeat = lambda *details: next_beats.append(details)
    await next_call.run(warm.chat, request)
    assert next_beats[0] == (0, Usage(llm_calls=1))


def test_the_heartbeat_interval_is_derived_from_the_timeout() -> None:
    assert heartbeat_interval(HEARTBEAT_TIMEOUT) == 2.0
    assert heartbeat_interval(timedelta(seconds=30)) == 6.0
    assert heartbeat_interval(timedelta(seconds=1)) == 0.5  # the floor
    assert heartbeat_interval(None) == 2.0  # still beats, to receive cancellation


@pytest.mark.parametrize(("timeout", "at_least", "at_most"), [(timedelta(seconds=1), 3, 4),
                                                               (timedelta(seconds=30), 1, 1)])
async def test_an_activity_beats_at_the_interval_of_its_scheduled_timeout(
        timeout: timedelta, at_least: int, at_most: int) -> None:
    @heartbeating
    async def slow() -> None:
        await asyncio.sleep(1.2)

    environment = ActivityEnvironment()
    environment.info = replace(ActivityEnvironment.default_info(), heartbeat_timeout=timeout)
    beats: list[Any] = []
    environment.on_heartbeat = lambda *details: beats.append(details)
    started = time.monotonic()
    await environment.run(slow)
    assert time.monotonic() - started < 3
    assert at_least <= len(beats) <= at_most


async def test_every_beat_repeats_the_details_the_attempt_started_with() -> None:
    """A lost attempt must not erase the provider failures counted by the attempts before it."""
    @heartbeating
    async def slow() -> None:
        await asyncio.sleep(1.2)

    environment = ActivityEnvironment()
    environment.info = replace(ActivityEnvironment.default_info(), heartbeat_timeout=timedelta(seconds=1),
                               heartbeat_details=[2])
    beats: list[Any] = []
    environment.on_heartbeat = lambda *details: beats.append(details)
    await environment.run(slow)
    assert len(beats) >= 2 and set(beats) == {(2,)}


# ------------------------------------------------------------------------------ summaries


def test_untrusted_text_becomes_one_short_line_without_markup() -> None:
    text = summary_text("  solid\nstate  " + "x" * 200)
    assert text.startswith("solid state xx") and text.endswith("…") and len(text) == SUMMARY_MAX_CHARS
    assert summary_text("see [this](https://evil.example) <img src=x>") == (
        "see \\[this\\](https://evil.example) \\<img src=x\\>")


@pytest.mark.parametrize(("url", "summary"), [
    ("https://user:secret@Docs.Example.org:8443/private/path?token=abc#x", "crawl_tool: docs.example.org"),
    ("http://[not-an-address", "crawl_tool: (no host)"),
    ("no url at all", "crawl_tool: (no host)"),
])
def test_a_crawl_summary_names_the_host_only_and_never_raises(url: str, summary: str) -> None:
    assert ACTIVITY_OPTIONS["crawl_tool"].summary(CrawlRequest(url=url)) == summary


async def test_a_research_run_shows_each_activity_in_the_timeline(time_worker: Client) -> None:
    handle = await start(time_worker, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    lines = summaries(await handle.fetch_history(), time_worker)
    assert lines[0] == ("load_run_config", "load_run_config · 0 resource(s)")
    assert lines[1] == ("chat", "coordinator")
    kind, background = lines[2]
    assert kind == "web_search" and background.startswith("web_search: ") and len(background) > 12
    assert lines[3] == ("chat", "planner · v1")
    assert lines[-1] == ("chat", "reporter")
    researcher = [summary for kind, summary in lines[4:-1] if kind == "chat"]
    assert researcher and researcher[0].startswith("researcher ")
    assert all(re.fullmatch(r"researcher · step 1 · turn \d+", summary) for summary in researcher)
    assert [int(summary.rsplit(" ", 1)[1]) for summary in researcher] == list(range(1, len(researcher) + 1))
    for kind, summary in lines[4:-1]:
        if kind != "chat":
            assert summary.startswith(f"{kind}: ")


# -------------------------------------------- one agent step on fakes registered under the real names

HOSTILE_QUERY = "batteries [click](https://evil.example) " + "y" * 200
STEP_CALLS = [
    ToolCall(id="c1", name="python_repl_tool", arguments={"code": "print(6 * 7)"}),
    ToolCall(id="c2", name="crawl_tool", arguments={"url": "http://[not-an-address"}),
    ToolCall(id="c3", name="crawl_tool", arguments={"url": "https://user:pw@Example.org/report?key=k"}),
    ToolCall(id="c4", name="web_search", arguments={"query": HOSTILE_QUERY}),
    ToolCall(id="c5", name="search_code", arguments={"q": "heat pump"}),
]


@activity.defn(name="chat")
async def fake_chat(request: ChatRequest) -> ChatResponse:
    if any(message.role == "tool" for message in request.messages):
        return ChatResponse(message=ChatMessage(role="assistant", content="done"))
    return ChatResponse(message=ChatMessage(role="assistant", tool_calls=STEP_CALLS))


@activity.defn(name="python_repl_tool")
async def fake_python(request: PythonRequest) -> PythonResult:
    return PythonResult(stdout="42\n", exit_code=0)


@activity.defn(name="crawl_tool")
async def fake_crawl(request: CrawlRequest) -> CrawlResult:
    if "[" in request.url:
        raise ApplicationError(f"Refused to crawl {request.url}: not a URL", type="CrawlRefused", non_retryable=True)
    return CrawlResult(url=request.url, markdown="page")


@activity.defn(name="web_search")
async def fake_search(request: SearchRequest) -> SearchResponse:
    return SearchResponse(query=request.query, results=[])


@activity.defn(name="mcp_call_tool")
async def fake_mcp_call(request: MCPCallRequest) -> MCPCallResult:
    return MCPCallResult(content="no matches")


@workflow.defn(sandboxed=False)
class AgentStepProbe:
    """One agent step of step 3, with a coder that also has the web tools and one MCP tool."""

    @workflow.run
    async def run(self) -> str:
        agent = AgentSpec(name="coder", prompt="coder", tools=("python_repl_tool", "crawl_tool", "web_search"))
        # The pages were found (in the task, say): they are crawled, as a found URL must be.
        found = FoundUrls(call.arguments["url"] for call in STEP_CALLS if call.name == "crawl_tool")
        context = ToolContext(max_search_results=3, mcp_routes={"search_code": MCPServerChoice(name="github")},
                              step_number=3, found=found)
        return await run_agent(agent, {}, "Compute it.", 3, context, Usage())


async def test_an_agent_step_shows_step_turn_and_tool_lines(time_env: WorkflowEnvironment) -> None:
    queue = f"probe-{uuid.uuid4().hex[:8]}"
    client = time_env.client
    tools = [fake_crawl, fake_search, fake_mcp_call]
    async with Worker(client, task_queue=queue, workflows=[AgentStepProbe]), \
            Worker(client, task_queue=queue_name("model", queue), activities=[fake_chat]), \
            Worker(client, task_queue=queue_name("tools", queue), activities=tools), \
            Worker(client, task_queue=queue_name("sandbox", queue), activities=[fake_python]):
        handle = await client.start_workflow(AgentStepProbe.run, id=queue, task_queue=queue)
        # The unparsable URL costs a tool message, not the run (nor a workflow task retried for ever).
        assert await asyncio.wait_for(handle.result(), 30) == "done"
        lines = summaries(await handle.fetch_history(), client)
    assert lines[0] == ("chat", "coder · step 3 · turn 1")
    assert lines[-1] == ("chat", "coder · step 3 · turn 2")
    # A turn's tool calls run concurrently: their order is not the point.
    assert sorted(lines[1:-1]) == sorted([
        ("python_repl_tool", "python_repl_tool · step 3"),
        ("crawl_tool", "crawl_tool: (no host)"),
        ("crawl_tool", "crawl_tool: example.org"),
        ("web_search", "web_search: " + summary_text(HOSTILE_QUERY)),
        ("mcp_call_tool", "mcp: github.search_code"),
    ])
    search_line = summary_text(HOSTILE_QUERY)
    assert "\\[click\\]" in search_line and search_line.endswith("…")
