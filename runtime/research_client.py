"""The research workflow's client contract, typed: start a run, read its status, review its plan,
answer its question, by method references to ``DeepResearchWorkflow``'s handlers.

Why method references and not names: the SDK takes each handler's name and result type from the
workflow's own decorators, so a renamed handler or a changed result type is one edit in
workflows/research.py, not a string to find in every client (the CLI, the API server, the tests).
The workflow is registered as the dynamic workflow (its input validated in
workflows/run_input.py); that changes how its *start* is decoded, not its handlers, so only the
start goes by type name (``WORKFLOW_TYPE``).

This module does I/O (it talks to the Temporal server): workflow code never imports it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import temporalio.workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy

from workflows.models import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult, ReviewOutcome, RunStatus
from workflows.research import DeepResearchWorkflow

ResearchHandle = WorkflowHandle[Any, ResearchResult]
# ``review_plan`` or ``answer_clarification``: a validated update that a person's text answers.
Update = Callable[[WorkflowHandle[Any, Any], str], Awaitable[ReviewOutcome]]


def _query_name(query: Any) -> str:
    """A query handler's name as the SDK's ``handle.query`` reads it, for calls that take a name."""
    definition = temporalio.workflow._QueryDefinition.from_fn(query)
    if definition is None or definition.name is None:
        raise TypeError(f"{query!r} is not a named workflow query")
    return definition.name


# For a query sent through the raw service API (cli/watch.py: one attempt, no SDK retries).
STATUS_QUERY = _query_name(DeepResearchWorkflow.status)


async def start(client: Client, request: ResearchRequest, *, run_id: str, summary: str,
                id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE) -> ResearchHandle:
    """Start a research run on the workflow's task queue; ``summary`` is the Web UI's static summary."""
    return await client.start_workflow(WORKFLOW_TYPE, request, id=run_id, task_queue=TASK_QUEUE,
                                       result_type=ResearchResult, static_summary=summary,
                                       id_reuse_policy=id_reuse_policy)


async def status(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    """The ``status`` query: where the run stands (answered by a worker, even for a closed run)."""
    return await handle.query(DeepResearchWorkflow.status)


async def review_plan(handle: WorkflowHandle[Any, Any], feedback: str) -> ReviewOutcome:
    """The ``review_plan`` update (``[ACCEPTED]`` or ``[EDIT_PLAN] …``); its validator's refusal
    comes back as ``WorkflowUpdateFailedError``."""
    return await handle.execute_update(DeepResearchWorkflow.review_plan, feedback)


async def answer_clarification(handle: WorkflowHandle[Any, Any], answer: str) -> ReviewOutcome:
    """The clarification update: the answer to the coordinator's question."""
    return await handle.execute_update(DeepResearchWorkflow.answer_clarification, answer)

