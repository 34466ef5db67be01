"""What the workflow tests share: the research question, starting a run, and waiting on its status.

Why a module of its own: a helper imported from another test file drags that file's tests into
every importer, and a copied question drifts. Runs started through :func:`start` are terminated
after each test by ``conftest``, so a run a test leaves behind cannot consume the next test's
injected faults. Model requests per agent come from ``FakeModelServer.requests_for``, which
recognises an agent exactly as the fake does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.status import Phase, RunStatus
from workflows.research.status_view import OFFLINE_NOTICE

QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
OFFLINE_REPORT = f"> {OFFLINE_NOTICE}\n\n# "  # how a saved report the offline model wrote begins

# A short report in DeerFlow's shape for the content flows: title, key points, overview, a table,
# an image, analysis, and citations from three sites (one cited twice).
SAMPLE_REPORT = """# Tidal power in 2030

## Key Points
- Tidal stream turbines produce predictable power [EMEC](https://www.emec.org.uk/tidal).
- Costs fell by a third since 2018 [ORE](https://ore.catapult.org.uk/costs).

## Overview
Tidal energy uses the rise and fall of the sea. It is predictable years ahead.

![A turbine](https://example.org/turbine.png)

## Detailed Analysis
| Site | Capacity (MW) |
|---|---|
| MeyGen | 6 |
| Paimpol | 2 |

Output is steady but sites are few [EMEC](https://emec.org.uk/sites).

## Key Citations
- [EMEC](https://www.emec.org.uk/tidal)
- [ORE Catapult](https://ore.catapult.org.uk/costs)
"""

# Signals a run must ignore (not a string, not the protocol, no input, two inputs): each is one
# signal's arguments, sent to the plan under review, which stays under review. The recorded
# history ``ignored_feedback`` sends them too (tests/record_histories.py).
IGNORED_SIGNALS: list[Any] = [[42], ["nonsense"], [], ["[ACCEPTED]", "[ACCEPTED]"]]

STARTED: list[WorkflowHandle] = []  # runs for conftest to terminate after the test


def run_id(prefix: str = "test") -> str:
    """A workflow ID no other test (or earlier session on the same server) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def start(client: Client, *, task_queue: str = TASK_QUEUE, **fields: object) -> WorkflowHandle:
    """Start a run on :data:`QUESTION` (``fields`` override the request), terminated after the test."""
    request = ResearchRequest.model_validate({"question": QUESTION, **fields})
    handle = await client.start_workflow(WORKFLOW_TYPE, request, id=run_id(), task_queue=task_queue,
                                         result_type=ResearchResult)
    STARTED.append(handle)
    return handle


async def wait_for(handle: WorkflowHandle, predicate: Callable[[RunStatus], bool], timeout: float = 30) -> RunStatus:
    """Poll the ``status`` query until ``predicate`` holds; fail with the last status after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if predicate(status):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status never matched; last: {status.model_dump_json(indent=1)}")
        await asyncio.sleep(0.05)


async def cancelled_status(handle: WorkflowHandle) -> RunStatus:
    """The status of a run that must end cancelled on the server (so it has no result to read)."""
    try:
        await handle.result()
    except WorkflowFailureError as ended:
        assert isinstance(ended.cause, CancelledError), f"the run failed instead: {ended.cause}"
    else:
        raise AssertionError("the run completed where it should have ended cancelled")
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    return await handle.query("status", result_type=RunStatus)


async def listed(client: Client, query: str, until: Callable[[list[WorkflowExecution]], bool],
                 timeout: float = 30) -> list[WorkflowExecution]:
    """The runs ``query`` lists, once ``until`` holds of them; fail with the last list after ``timeout``.

    The list is eventually consistent: the server writes a run's visibility record from a queue of
    its own after the history, so on a loaded host a run that has ended can be missing from a
    query on its end state for a while (seen: ``DeerFlowPhase = 'completed'`` empty at nice 15).
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        executions = [execution async for execution in client.list_workflows(query)]
        if until(executions):
            return executions
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{query!r} never listed what was expected; last: {[e.id for e in executions]}")
        await asyncio.sleep(0.2)


def awaiting_review(status: RunStatus) -> bool:
    """The run is paused for a person's plan feedback."""
    return status.phase is Phase.AWAITING_REVIEW and status.awaiting == "plan_feedback"
