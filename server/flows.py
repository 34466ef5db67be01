"""Starting a content flow's small workflow from a request, and waiting for its answer.

Shared by the content endpoints (server/content.py) and the MCP check (server/mcp_check.py): each
run gets an execution timeout, the operator's ``DEERFLOW_WEB_CONTENT_WAIT``, as long as its request
waits, so a run nobody waits for any more ends on its own, and a failed or late run is a JSON error
naming why. A worker lost mid-flow costs nothing more: the run goes on when one polls again, and
the request, still waiting, answers then.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import TimeoutError as RunTimeout

from config.settings import Settings
from runtime.run_memo import flow_memo
from server.security import RequestError, read_json
from workflows.calls.errors import failure_message
from workflows.contracts.decisions import Actor
from workflows.contracts.research import TASK_QUEUE

R = TypeVar("R", bound=BaseModel)


async def read_content(request: Request, max_bytes: int) -> Any:
    """The body as JSON; one beyond the operator's cap is a bad request (400), nothing started."""
    try:
        return await read_json(request, max_bytes)
    except RequestError as error:
        if error.status == 413:
            raise RequestError(f"the request is over the operator's cap of {max_bytes} bytes "
                               "(DEERFLOW_WEB_MAX_CONTENT_BYTES)", 400) from error
        raise


def flow_id(label: str) -> str:
    return f"{label.replace(' ', '-')}-{uuid.uuid4().hex[:16]}"


def wait(settings: Settings) -> timedelta:
    """How long a request waits for its flow, and how long the flow's run may take at all."""
    return timedelta(seconds=settings.web_content_wait)


async def start_flow(client: Client, settings: Settings, workflow: str, request: BaseModel, result_type: type[R],
                     label: str, started_by: Actor, workflow_id: str | None = None) -> WorkflowHandle[Any, R]:
    """Start the flow, its memo naming the token's holder who asked (``starter.py costs`` reads it)."""
    return await client.start_workflow(
        workflow, request, id=workflow_id or flow_id(label), task_queue=TASK_QUEUE, result_type=result_type,
        execution_timeout=wait(settings), static_summary=f"{label.capitalize()} (web)", memo=flow_memo(started_by))


async def flow_result(handle: WorkflowHandle[Any, R], settings: Settings, label: str) -> R:
    """The run's result; a failed run is a 502 naming why, one that takes too long a 504 (whether the
    request's wait or the run's own timeout, which end together, ends first)."""
    late = RequestError(f"the {label} did not answer within {settings.web_content_wait:g} s "
                        "(is a worker running?)", 504)
    try:
        return await asyncio.wait_for(handle.result(), settings.web_content_wait)
    except WorkflowFailureError as error:
        if isinstance(error.cause, RunTimeout):
            raise late from error
        raise RequestError(f"the {label} failed: {failure_message(error.cause)}", 502) from error
    except TimeoutError as error:
        raise late from error
