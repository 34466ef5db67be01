"""One decision for every run a filter matches: accept every plan waiting for review, cancel every
run a query names (``starter.py review --all-awaiting``, ``cancel --query``, and the API's).

Why each run gets its own update or cancel request, a few at a time, and not one of Temporal's batch
operations: a batch operation signals or cancels what a query matches with one identity and reports
only how many it reached. Here who decided is recorded on each run (workflows/decisions.py), the
API server checks each run's starter against the caller's role before it acts, and the answer says
what happened to each run: its plan accepted, skipped (it no longer waited for one, or had ended),
refused (the caller may see it but not do this to it), or failed (no worker took the update in
time: it may still reach the run). An update goes through the run's own validator, so a plan
accepted twice, or a run that moved on meanwhile, is told apart from one that took it.

The runs are listed first (the server's visibility index, runtime/run_listing.py), then acted on
:data:`AT_ONCE` at a time: a listing read while its runs change underneath it could skip some.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from runtime import research_client
from workflows.decisions import Actor
from workflows.errors import failure_message
from workflows.review import ACCEPTED

AT_ONCE = 16  # updates or cancels in flight: the worker validates each update in a workflow task
NOTES_KEPT = 100  # runs named in an answer (those not decided); the counts cover them all


class Verdict(StrEnum):
    DECIDED = "decided"
    SKIPPED = "skipped"
    REFUSED = "refused"
    FAILED = "failed"


@dataclass
class BulkOutcome:
    """How many runs were decided, skipped, refused or failed, and why for the first few not decided."""

    decided: int = 0
    skipped: int = 0
    refused: int = 0
    failed: int = 0
    notes: list[dict[str, str]] = field(default_factory=list)  # {"id", "verdict", "reason"}

    def count(self, run: str, verdict: Verdict, reason: str) -> None:
        setattr(self, verdict.value, getattr(self, verdict.value) + 1)
        if verdict is not Verdict.DECIDED and len(self.notes) < NOTES_KEPT:
            self.notes.append({"id": run, "verdict": verdict.value, "reason": reason})

    def line(self, decided: str) -> str:
        """``12 plans accepted, 1 skipped, 0 refused, 0 failed`` in the command's words for ``decided``."""
        return f"{self.decided} {decided}, {self.skipped} skipped, {self.refused} refused, {self.failed} failed"


Act = Callable[[WorkflowExecution], Awaitable[tuple[Verdict, str] | None]]


async def matching(client: Client, query: str) -> list[WorkflowExecution]:
    """Every run ``query`` matches now (a page of up to 1,000 a request)."""
    return [execution async for execution in client.list_workflows(query)]


async def for_each(executions: list[WorkflowExecution], act: Act, at_once: int = AT_ONCE) -> BulkOutcome:
    """``act`` on each run, ``at_once`` at a time; a run ``act`` answers None for is not counted
    (a run the caller may not even see)."""
    outcome, gate = BulkOutcome(), asyncio.Semaphore(at_once)

    async def one(execution: WorkflowExecution) -> None:
        async with gate:
            verdict = await act(execution)
        if verdict is not None:
            outcome.count(execution.id, *verdict)

    await asyncio.gather(*(one(execution) for execution in executions))
    return outcome


async def accept_plan(client: Client, run: str, by: Actor, wait_seconds: float) -> tuple[Verdict, str]:
    """The ``review_plan`` update ``[ACCEPTED]`` from ``by``, waiting at most ``wait_seconds`` for a worker."""
    handle = client.get_workflow_handle(run)
    try:
        reply = await asyncio.wait_for(research_client.review_plan(handle, ACCEPTED, by), wait_seconds)
    except WorkflowUpdateFailedError as error:  # the run's validator: it no longer waits for a review
        return Verdict.SKIPPED, failure_message(error.cause)
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        return Verdict.FAILED, f"no worker took the review within {wait_seconds:.0f} s; it may still reach the run"
    except RPCError as error:
        return _refusal(error)
    return (Verdict.DECIDED if reply.accepted else Verdict.SKIPPED), reply.message


async def cancel_run(client: Client, run: str, by: Actor) -> tuple[Verdict, str]:
    """A cancel request naming ``by``; the run ends cancelled once a worker takes it."""
    try:
        await research_client.cancel(client.get_workflow_handle(run), by)
    except RPCError as error:
        return _refusal(error)
    return Verdict.DECIDED, "cancellation requested"


def _refusal(error: RPCError) -> tuple[Verdict, str]:
    """A run that ended since it was listed is skipped; any other error failed its decision."""
    if error.status == RPCStatusCode.NOT_FOUND:
        return Verdict.SKIPPED, "it has ended"
    return Verdict.FAILED, error.message
