"""Injected provider faults, end to end through the real clients and the real workflow.

Every run either completes, or ends with a clear error naming the cause; no retry is unbounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from offline.model_server import FakeModelServer, Fault
from offline.search_server import FakeSearchServer
from offline.search_server import Fault as SearchFault
from tests.support.runs import start
from tests.support.settings import READINGS, settings_with
from tests.support.workers import WorkerWith
from workflows.calls.errors import failure_message
from workflows.contracts.research import Outcome


@pytest.fixture
async def impatient(provider_env: dict[str, str], worker_with: WorkerWith) -> AsyncIterator[Client]:
    """A worker whose client timeouts are about a second, so injected hangs cost little real time."""
    async with worker_with(settings_with(provider_env, LLM_REQUEST_TIMEOUT="1", SEARCH_TIMEOUT_SECONDS="1")) as client:
        yield client


async def max_attempt(handle: WorkflowHandle) -> int:
    history = await handle.fetch_history()
    return max((event.activity_task_started_event_attributes.attempt for event in history.events
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED), default=0)


@pytest.mark.parametrize(
    "fault",
    [Fault.status(429, "slow down", retry_after=2), Fault.status(500), Fault.status(503), Fault.timeout(3),
     Fault.truncated()],
    ids=["429-retry-after", "500", "503", "read-timeout", "truncated-body"],
)
async def test_a_transient_model_fault_mid_step_is_retried_and_the_run_completes(
    impatient: Client, model_server: FakeModelServer, fault: Fault
) -> None:
    model_server.inject(Fault(**{**fault.__dict__, "agent": "researcher"}))
    handle = await start(impatient, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and result.plan.steps[0].execution_res
    assert await max_attempt(handle) == 2
    assert not model_server.pending_faults


async def test_an_empty_completion_mid_step_is_asked_again_within_the_turn(
    impatient: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault(**{**Fault.empty().__dict__, "agent": "researcher"}))
    handle = await start(impatient, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and result.plan.steps[0].execution_res
    assert await max_attempt(handle) == 1  # the turn asked again itself (issue #24), no activity retry
    empty, again = model_server.requests_for("researcher")[:2]
    assert empty["messages"] == again["messages"] and not model_server.pending_faults
    assert result.usage.llm_calls == len(model_server.requests)  # the empty ask counts in the usage


@pytest.mark.parametrize("reading", list(READINGS))
async def test_invalid_tool_call_arguments_are_answered_and_the_step_goes_on(
    provider_env: dict[str, str], worker_with: WorkerWith, model_server: FakeModelServer, reading: str
) -> None:
    """Read whole or streamed (previews while a page watches), never mended into a call (issue #42, item 8)."""
    model_server.inject(Fault.invalid_tool_args(agent="researcher"))
    async with worker_with(settings_with(provider_env, **READINGS[reading])) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=1)
        result = await handle.result()
    assert result.outcome is Outcome.REPORT
    researcher_turns = model_server.requests_for("researcher")
    assert bool(researcher_turns[0].get("stream")) is (reading == "streamed")
    tool_replies = [m["content"] for m in researcher_turns[1]["messages"] if m["role"] == "tool"]
    assert tool_replies and "not valid JSON" in tool_replies[0] and "unterminated" in tool_replies[0]


async def test_a_model_that_stays_down_ends_the_run_with_a_clear_error(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(*[Fault.status(503, "upstream overloaded", agent="planner") for _ in range(10)])
    handle = await start(time_worker)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    message = failure_message(failed.value.cause)
    assert "planning" in message and "HTTP 503" in message and "upstream overloaded" in message
    assert await max_attempt(handle) == 6  # bounded by the provider's attempts (activities/support/retry_pacing.py)


async def test_search_5xx_is_retried_and_the_step_gets_its_results(
    time_worker: Client, search_server: FakeSearchServer
) -> None:
    search_server.inject(SearchFault.http(502), SearchFault.http(500))
    handle = await start(time_worker, auto_accept_plan=True, max_step_num=1, enable_background_investigation=False)
    result = await handle.result()
    assert result.plan is not None
    finding = result.plan.steps[0].execution_res or ""
    assert "https://offline.deerflow.example/" in finding
    assert await max_attempt(handle) == 3


async def test_search_that_keeps_timing_out_becomes_a_tool_error_and_the_run_reports(
    impatient: Client, search_server: FakeSearchServer
) -> None:
    search_server.inject(*[SearchFault.timeout(3) for _ in range(8)])
    handle = await start(impatient, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None
    finding = (result.plan.steps[0].execution_res or "").lower()
    assert "fail" in finding and "did not answer within 1 s" in finding
