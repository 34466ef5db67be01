"""The research workflow's client contract, typed: start a run, read its status, review its plan,
answer its question.

Each handler is sent by the name the workflow declares it with (``STATUS_QUERY`` and the others in
workflows/contracts/research.py) and read back as the type it returns, rather than by a method reference to
``DeepResearchWorkflow``: a reference imports the workflow's whole code (its stages, the plan
parser), a tenth of a second before every ``status``, ``review`` and ``list`` (issue #45), and the CLI
and the API server never run it. tests/test_research_client.py checks each name and result type
here against the workflow's own definition, which is what a reference would have guaranteed. The
workflow is registered as the dynamic workflow (its input validated in workflows/research/run_input.py);
its start goes by type name (``WORKFLOW_TYPE``). This module does I/O (it talks to the Temporal
server): workflow code never imports it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from runtime.run_memo import indexes_questions, run_memo, start_attributes
from workflows.contracts.budget import BudgetDecision
from workflows.contracts.decisions import Actor, cancel_reason
from workflows.contracts.research import (
    CHECKPOINT_QUERY,
    DECIDE_BUDGET_UPDATE,
    REVIEW_PLAN_UPDATE,
    STATUS_QUERY,
    TASK_QUEUE,
    WORKFLOW_TYPE,
    ResearchRequest,
    ResearchResult,
    ReviewOutcome,
)
from workflows.contracts.status import Awaiting, RunStatus
from workflows.research.run_state import RunState

ResearchHandle = WorkflowHandle[Any, ResearchResult]
# A status query the server answered "context canceled" is asked again this many times, after this
# pause times the attempt's number (see ``status``).
CANCELLED_QUERY_RETRIES = 3
CANCELLED_QUERY_PAUSE_SECONDS = 0.2
# ``review_plan``, ``answer_clarification`` or ``decide_budget``: a validated update a person sends.
Update = Callable[[WorkflowHandle[Any, Any], Any, Actor], Awaitable[ReviewOutcome]]


async def start(client: Client, request: ResearchRequest, *, run_id: str, summary: str, started_by: Actor,
                id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE) -> ResearchHandle:
    """Start a research run on the workflow's task queue; ``summary`` is the Web UI's static summary.

    The question and who started it go into the memo as well: a listing returns memos for free,
    so the page names each run by its question, and the API server shows each token its own runs,
    without a lookup per run. Both are indexed (runtime/run_memo.py: the question only where
    payloads are not encrypted) so lists filter on them; a namespace that lacks those search
    attributes (registered by the worker where it may) gets the run without them.
    """
    options: dict[str, Any] = {
        "id": run_id, "task_queue": TASK_QUEUE, "result_type": ResearchResult, "static_summary": summary,
        "memo": run_memo(request.question, started_by, request.forked_from), "id_reuse_policy": id_reuse_policy}
    attributes = start_attributes(request.question, started_by, index_question=indexes_questions(client))
    try:
        return await client.start_workflow(WORKFLOW_TYPE, request, search_attributes=attributes, **options)
    except RPCError as error:
        if not _unknown_search_attribute(error):
            raise
    return await client.start_workflow(WORKFLOW_TYPE, request, **options)


def _unknown_search_attribute(error: RPCError) -> bool:
    """The server's refusal of a start naming a search attribute the namespace does not define."""
    return error.status == RPCStatusCode.INVALID_ARGUMENT and "search attribute" in error.message


async def status(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    """The ``status`` query: where the run stands (answered by a worker, even for a closed run).

    A query that reaches the server as a worker dies can come back ``CANCELLED`` ("context
    canceled": seen once, sent right after a worker's kill, in a loaded test run), a code the SDK's
    client never retries, where the next query is answered by a live worker. A query only reads,
    so it is asked again, a few times. Every other error is the caller's to show.
    """
    retries = 0
    while True:
        try:
            return await handle.query(STATUS_QUERY, result_type=RunStatus)
        except RPCError as error:
            if error.status != RPCStatusCode.CANCELLED or retries == CANCELLED_QUERY_RETRIES:
                raise
        retries += 1
        await asyncio.sleep(CANCELLED_QUERY_PAUSE_SECONDS * retries)


async def checkpoint(handle: WorkflowHandle[Any, Any]) -> RunState:
    """The ``checkpoint`` query: everything the run knows (what a fork of it reuses). A closed run's is
    its state at its end, rebuilt by a worker replaying its history."""
    return await handle.query(CHECKPOINT_QUERY, result_type=RunState)


async def review_plan(handle: WorkflowHandle[Any, Any], feedback: str, by: Actor,
                      update_id: str | None = None) -> ReviewOutcome:
    """The ``review_plan`` update (``[ACCEPTED]`` or ``[EDIT_PLAN] …``) from ``by``; its validator's
    refusal comes back as ``WorkflowUpdateFailedError``. The same ``update_id`` sent again attaches to
    the first (the server keeps one update per id and run): a retry decides nothing twice."""
    return await handle.execute_update(REVIEW_PLAN_UPDATE, args=[feedback, by], id=update_id,
                                       result_type=ReviewOutcome)


async def answer_clarification(handle: WorkflowHandle[Any, Any], answer: str, by: Actor) -> ReviewOutcome:
    """The clarification update: the answer to the coordinator's question, from ``by``."""
    return await handle.execute_update(Awaiting.CLARIFICATION.value, args=[answer, by],
                                       result_type=ReviewOutcome)


async def decide_budget(handle: WorkflowHandle[Any, Any], decision: BudgetDecision, by: Actor) -> ReviewOutcome:
    """The ``decide_budget`` update for a run paused at its token budget: raise, finish or cancel."""
    return await handle.execute_update(DECIDE_BUDGET_UPDATE, args=[decision, by], result_type=ReviewOutcome)


async def cancel(handle: WorkflowHandle[Any, Any], by: Actor) -> None:
    """Cancel the run, naming who did it in the request's reason (the run records it)."""
    await handle.cancel(reason=cancel_reason(by))

