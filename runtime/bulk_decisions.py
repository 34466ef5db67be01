"""One decision for every run a filter matches: accept every plan waiting for review, cancel every
run a query names (``starter.py review --all-awaiting``, ``cancel --query``, and the API's).

Why each run gets its own update or cancel request, a few at a time, and not one of Temporal's batch
operations: a batch operation signals or cancels what a query matches with one identity and reports
only how many it reached. Here who decided is recorded on each run (workflows/contracts/decisions.py), the
API server checks each run's starter against the caller's role before it acts, and the answer says
what happened to each run: its plan accepted, skipped (it no longer waited for one, or had ended),
refused (the caller may see it but not do this to it), pending or failed. An update goes through
the run's own validator, so a plan accepted twice, or a run that moved on meanwhile, is told apart
from one that took it.

Pending and failed are told apart because a loaded fleet makes both (issue #46: 8-19 of 300 updates
were not taken within the wait beside the research of the runs already accepted, and every one of
them reached its run). Each review carries an update id of the decision's own (``decision_id``):
when no worker confirms it within the wait, the server is asked whether it holds that update for
the run. It does: pending (sent, not yet confirmed: it reaches the run with its next workflow task,
unless the run moves on first). It does not: failed (the server never had it, or lost it: decide
again). The same id sent again attaches to the same update (the server keeps one per id and run),
so a caller that retries a decision with the same id, as the API's ``request_id`` does, learns what
became of it and decides nothing twice.

The runs are listed first (the server's visibility index, runtime/run_listing.py), then acted on
:data:`AT_ONCE` at a time: a listing read while its runs change underneath it could skip some.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from temporalio.api.common.v1 import WorkflowExecution as ExecutionRef
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from runtime import research_client
from runtime.memo_listing import memo_fields
from runtime.run_listing import RunFilter
from runtime.run_memo import QUESTION, indexes_questions, question_in
from workflows.calls.errors import failure_message
from workflows.contracts.decisions import Actor
from workflows.research.review import ACCEPTED

AT_ONCE = 16  # updates or cancels in flight: the worker validates each update in a workflow task
NOTES_KEPT = 100  # runs named in an answer (those not decided); the counts cover them all
PROBE_SECONDS = 10.0  # for the server to say whether it holds an update no worker confirmed
ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
ACCEPTED_STAGE = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED


class Verdict(StrEnum):
    DECIDED = "decided"
    SKIPPED = "skipped"
    REFUSED = "refused"
    PENDING = "pending"  # sent, the server holds it for the run, no worker confirmed it yet
    FAILED = "failed"


@dataclass
class BulkOutcome:
    """How many runs were decided, skipped, refused, pending or failed, and why for the first few not decided."""

    decided: int = 0
    skipped: int = 0
    refused: int = 0
    pending: int = 0
    failed: int = 0
    notes: list[dict[str, str]] = field(default_factory=list)  # {"id", "verdict", "reason"}

    def count(self, run: str, verdict: Verdict, reason: str) -> None:
        setattr(self, verdict.value, getattr(self, verdict.value) + 1)
        if verdict is not Verdict.DECIDED and len(self.notes) < NOTES_KEPT:
            self.notes.append({"id": run, "verdict": verdict.value, "reason": reason})

    def line(self, decided: str) -> str:
        """``12 plans accepted, 1 skipped, 0 refused, 0 pending, 0 failed`` in the command's words for ``decided``."""
        return (f"{self.decided} {decided}, {self.skipped} skipped, {self.refused} refused, {self.pending} pending, "
                f"{self.failed} failed")


Act = Callable[[WorkflowExecution], Awaitable[tuple[Verdict, str] | None]]


async def matching(client: Client, wanted: RunFilter, scope: str | None = None) -> list[WorkflowExecution]:
    """Every run ``wanted`` matches now within ``scope`` (a page of up to 1,000 a request). Where the
    index keeps no questions (encrypted payloads), the question's words are checked on each run's memo,
    all read with one converter (runtime/memo_listing.py)."""
    indexed = indexes_questions(client)
    query = wanted.visibility_query(scope, question_indexed=indexed)
    runs = [execution async for execution in client.list_workflows(query)]
    memos = await memo_fields(client, [run.raw_info for run in runs], () if indexed else (QUESTION,))
    return [run for run, memo in zip(runs, memos, strict=True)
            if wanted.keeps_question(question_in(memo.get(QUESTION)), indexed)]


async def for_each(executions: list[WorkflowExecution], act: Act) -> BulkOutcome:
    """``act`` on each run, :data:`AT_ONCE` at a time; a run ``act`` answers None for is not counted
    (a run the caller may not even see)."""
    outcome, gate = BulkOutcome(), asyncio.Semaphore(AT_ONCE)

    async def one(execution: WorkflowExecution) -> None:
        async with gate:
            verdict = await act(execution)
        if verdict is not None:
            outcome.count(execution.id, *verdict)

    await asyncio.gather(*(one(execution) for execution in executions))
    return outcome


def decision_id(by: Actor, request_id: str | None = None) -> str:
    """The update id of one bulk decision: the caller's ``request_id`` (the same one again attaches to
    the same updates), else a new one. Bound to who decides: another caller's id reaches no update of theirs."""
    key = f"{by.via.value}:{by.name}:{request_id or uuid.uuid4()}"
    return f"review-all-{hashlib.sha256(key.encode()).hexdigest()[:32]}"


async def accept_plan(client: Client, run: str, by: Actor, wait_seconds: float,
                      update_id: str | None = None) -> tuple[Verdict, str]:
    """The ``review_plan`` update ``[ACCEPTED]`` from ``by`` (id ``update_id``, else a new one),
    waiting at most ``wait_seconds`` for a worker to confirm it; unconfirmed, pending or failed as the server says."""
    update_id = update_id or decision_id(by)
    try:
        return await _review(client, run, by, wait_seconds, update_id)
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        return await _unconfirmed(client, run, by, update_id, wait_seconds)


async def _review(client: Client, run: str, by: Actor, wait_seconds: float, update_id: str) -> tuple[Verdict, str]:
    handle = client.get_workflow_handle(run)
    try:
        reply = await asyncio.wait_for(research_client.review_plan(handle, ACCEPTED, by, update_id), wait_seconds)
    except WorkflowUpdateFailedError as error:  # the run's validator: it no longer waits for a review
        return Verdict.SKIPPED, failure_message(error.cause)
    except RPCError as error:
        return _refusal(error)
    return (Verdict.DECIDED if reply.accepted else Verdict.SKIPPED), reply.message


async def _unconfirmed(client: Client, run: str, by: Actor, update_id: str, waited: float) -> tuple[Verdict, str]:
    """What became of an update no worker confirmed within the wait, as the server says."""
    try:
        stage = (await client.workflow_service.poll_workflow_execution_update(PollWorkflowExecutionUpdateRequest(
            namespace=client.namespace, identity=client.identity, wait_policy=WaitPolicy(lifecycle_stage=ADMITTED),
            update_ref=UpdateRef(workflow_execution=ExecutionRef(workflow_id=run), update_id=update_id)),
            retry=True, timeout=timedelta(seconds=PROBE_SECONDS))).stage
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return Verdict.FAILED, (f"no worker took the review within {waited:.0f} s and the server no longer holds "
                                    "it (the run ended, or the server lost it): decide again")
        return Verdict.FAILED, f"no worker took the review within {waited:.0f} s: {error.message}"
    if stage >= ACCEPTED_STAGE:  # taken as the wait ended: the same id reads its outcome
        try:
            return await _review(client, run, by, PROBE_SECONDS, update_id)
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            pass
    return Verdict.PENDING, (f"sent: the server holds it for the run, but no worker confirmed it within "
                             f"{waited:.0f} s; it reaches the run with the run's next workflow task")


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
