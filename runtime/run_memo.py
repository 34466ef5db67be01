"""A research run's memo: its question and who started it, kept where a listing of runs carries them.

Our page's run list shows each run by its question. The workflow input holds it too, but reading
it there costs a history fetch per run; a memo comes with ``list_workflows`` itself. Every starter
of research runs (the page, DeerFlow's chat endpoint, ``starter.py run``) sets it; a run started
before it existed has none and is listed by its id. The content flows' starters (the API's content
routes and ``starter.py evaluate|slides|podcast``) set ``started_by`` alone.

Who started the run (``started_by``, an ``Actor``) decides which named API tokens may see and act on
it (server/access.py); a run without one (started before, or by the ``temporal`` CLI) is seen only by
roles that see every run.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio.client import WorkflowExecution, WorkflowExecutionDescription

from workflows.decisions import Actor
from workflows.fork_point import ForkPoint

QUESTION = "question"
STARTED_BY = "started_by"
FORKED_FROM = "forked_from"  # a fork's source and point: {"workflow_id": …, "at": "step 2"} (runtime/forks.py)
QUESTION_CHARS = 500  # a list entry, not the record: the input keeps the whole question


def run_memo(question: str, started_by: Actor, forked_from: ForkPoint | None = None) -> dict[str, Any]:
    memo = {QUESTION: question[:QUESTION_CHARS], **flow_memo(started_by)}
    if forked_from is not None:
        memo[FORKED_FROM] = {"workflow_id": forked_from.workflow_id, "at": forked_from.at}
    return memo


def flow_memo(started_by: Actor) -> dict[str, Any]:
    """A content flow's memo (prose, evaluation, slides, podcast, the enhancer, the MCP check): who
    started it, so ``starter.py costs`` puts its spend under that holder as it does a run's."""
    return {STARTED_BY: started_by.model_dump(mode="json")}


def forked_from_memo(value: object) -> dict[str, str] | None:
    """A fork's memo entry, if it is one (anyone who may start runs may write any memo)."""
    if not isinstance(value, dict):
        return None
    workflow_id, at = value.get("workflow_id"), value.get("at")
    return {"workflow_id": workflow_id, "at": at} if isinstance(workflow_id, str) and isinstance(at, str) else None


async def started_by(execution: WorkflowExecution | WorkflowExecutionDescription) -> Actor | None:
    """Who started the run, as its memo says (None: it does not say)."""
    value = await execution.memo_value(STARTED_BY, None)
    try:
        return Actor.model_validate(value) if value is not None else None
    except ValidationError:
        return None


async def question_of(execution: WorkflowExecution) -> str | None:
    value = await execution.memo_value(QUESTION, None)
    return value if isinstance(value, str) else None
