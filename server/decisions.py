"""A person's decision sent by the API server (the page's review, answer and budget buttons,
DeerFlow's interrupt feedback and clarification turns), bounded in time.

Why: a validated update waits for a worker to validate it. With the worker that ran the run dead
and none in its place (a deployment's workers down), the server holds the update for as long as
that lasts, and the request waited with it: the page's button or DeerFlow's chat showed nothing.
After :data:`DECISION_WAIT_SECONDS` the request is answered 504, as the SDK's own update timeout
is (server/services.py). The server may still hand the update to the next worker (it was
admitted), so the answer says to reload the run before sending it again; a second decision is
refused by the run's validator if the first was applied, so sending twice never decides twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle, WorkflowUpdateRPCTimeoutOrCancelledError

from runtime import research_client
from server.security import RequestError
from workflows.decisions import Actor
from workflows.models import ReviewOutcome

DECISION_WAIT_SECONDS = 30.0


async def decided(handle: WorkflowHandle[Any, Any], update: research_client.Update, value: Any,
                  by: Actor) -> ReviewOutcome:
    """``update(handle, value, by)``, or a 504 ``RequestError`` once no worker has taken it in time."""
    try:
        return await asyncio.wait_for(update(handle, value, by), DECISION_WAIT_SECONDS)
    # The SDK turns the cancelled call into its own timeout error, which wait_for then raises.
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        raise RequestError("no worker took the decision in time (are the workers running?); it may still reach "
                           "the run when one starts, so reload the run before sending it again", 504) from None
