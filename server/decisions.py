"""A person's decision sent by the API server (the page's review, answer and budget buttons,
DeerFlow's interrupt feedback and clarification turns), bounded in time.

Why: a validated update waits for a worker to validate it. With the worker that ran the run dead
and none in its place (a deployment's workers down), the server holds the update for as long as
that lasts, and the request waited with it: the page's button or DeerFlow's chat showed nothing.
After :data:`DECISION_WAIT_SECONDS` the call ends with the SDK's own update timeout, which every
route answers 504 (server/services.py) and the chat stream as an ``error`` event, in the words of
``server.chat.problem``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateRPCTimeoutOrCancelledError

from runtime import research_client
from workflows.contracts.decisions import Actor
from workflows.contracts.research import ReviewOutcome

DECISION_WAIT_SECONDS = 30.0


async def decided(handle: WorkflowHandle[Any, Any], update: research_client.Update, value: Any,
                  by: Actor) -> ReviewOutcome:
    """``update(handle, value, by)``, or the SDK's update timeout once no worker has taken it in time."""
    try:
        return await asyncio.wait_for(update(handle, value, by), DECISION_WAIT_SECONDS)
    except TimeoutError:  # the SDK turns its cancelled call into its own error, which wait_for raises; else this
        raise WorkflowUpdateRPCTimeoutOrCancelledError() from None
