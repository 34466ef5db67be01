"""A cancel ends the run cancelled whatever it was doing, on the time-skipping server.

The SDK answers a cancelled activity with an ``ActivityError`` whose cause is a ``CancelledError``;
caught as a failure, it ended the run Failed ("Error: Cancelled") where it was a model call, and
where a failure is forgiven (the background search, a tool call, an MCP listing) the run went on
and paid for the next calls. Each case holds a call in flight at the fake provider, cancels the
run, and checks that the run ended Cancelled, says who cancelled it, scheduled no activity after the
cancel reached it, and made no call after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from offline.model_faults import Fault
from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer
from offline.search_server import Fault as SearchFault
from runtime import research_client
from tests.support.runs import start
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import Outcome
from workflows.contracts.status import Phase, RunStatus

CAROL = Actor(name="carol", via=Via.CLI)
HELD_SECONDS = 4  # below the session's LLM_REQUEST_TIMEOUT (5 s): the call is in flight, not failing
SETTLE_SECONDS = 1.0


@dataclass(frozen=True)
class InFlight:
    """A run's request, the call it is cancelled in, and how to hold that call at the fake."""

    request: dict[str, object]
    model_fault: Fault | None = None  # held model call (by agent)
    held_search: bool = False  # the next search is held


CASES = {
    "coordinator": InFlight({"auto_accept_plan": True}, Fault.timeout(HELD_SECONDS, agent="coordinator")),
    "background search": InFlight({"auto_accept_plan": True}, held_search=True),
    "planner": InFlight({}, Fault.timeout(HELD_SECONDS, agent="planner")),
    "researcher turn": InFlight({"auto_accept_plan": True}, Fault.timeout(HELD_SECONDS, agent="researcher")),
    "researcher's search": InFlight({"auto_accept_plan": True, "enable_background_investigation": False},
                                    held_search=True),
    "parallel steps": InFlight({"auto_accept_plan": True, "parallel_steps": True},
                               Fault.timeout(HELD_SECONDS, agent="researcher")),
    "reporter": InFlight({"auto_accept_plan": True}, Fault.timeout(HELD_SECONDS, agent="reporter")),
}


def _arrived(case: InFlight, model_server: FakeModelServer, search_server: FakeSearchServer) -> Callable[[], bool]:
    """Whether the held call has reached its fake (and is being held there)."""
    if case.model_fault is not None:
        fault = case.model_fault
        return lambda: fault not in model_server.pending_faults
    return lambda: len(search_server.requests) > 0


@pytest.mark.parametrize("name", CASES)
async def test_a_cancel_while_a_call_is_in_flight_ends_the_run_cancelled(
    time_worker: Client, model_server: FakeModelServer, search_server: FakeSearchServer, name: str,
) -> None:
    case = CASES[name]
    if case.model_fault is not None:
        model_server.inject(case.model_fault)
    if case.held_search:
        search_server.inject(SearchFault.timeout(HELD_SECONDS))
    search_server.requests.clear()
    handle = await start(time_worker, **case.request)
    arrived = _arrived(case, model_server, search_server)
    for _ in range(600):
        if arrived():
            break
        await asyncio.sleep(0.05)
    assert arrived(), f"the {name} call never reached its fake"
    await research_client.cancel(handle, CAROL)
    with pytest.raises(WorkflowFailureError) as ended:
        await asyncio.wait_for(handle.result(), 30)
    assert isinstance(ended.value.cause, CancelledError), ended.value.cause
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert await scheduled_after_the_cancel(handle) == []
    # A call another step's activity had started before the cancel may reach its fake a moment after
    # the run ended (parallel steps, on a loaded machine): counted from a second on.
    await asyncio.sleep(SETTLE_SECONDS)
    calls = len(model_server.requests), len(search_server.requests)
    status = await handle.query("status", result_type=RunStatus)
    assert status.phase is not Phase.FAILED and status.error is None, status
    assert status.outcome is Outcome.CANCELLED, status
    assert [(d.kind, d.by) for d in status.decisions] == [("cancel", CAROL)]
    await asyncio.sleep(HELD_SECONDS + 1)  # a run that went on would have made its next call by now
    assert (len(model_server.requests), len(search_server.requests)) == calls


async def scheduled_after_the_cancel(handle: WorkflowHandle) -> list[str]:
    """The activities the run scheduled once its cancel was requested: none, for a run that stops."""
    events = (await handle.fetch_history()).events
    requested = next(index for index, event in enumerate(events)
                     if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
    return [event.activity_task_scheduled_event_attributes.activity_type.name for event in events[requested:]
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
