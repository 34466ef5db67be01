"""A research run's memo: its question, kept where a listing of runs carries it.

Our page's run list shows each run by its question. The workflow input holds it too, but reading
it there costs a history fetch per run; a memo comes with ``list_workflows`` itself. Every starter
of research runs (the page, DeerFlow's chat endpoint, ``starter.py run``) sets it; a run started
before it existed has none and is listed by its id.
"""

from __future__ import annotations

from temporalio.client import WorkflowExecution

QUESTION = "question"
QUESTION_CHARS = 500  # a list entry, not the record: the input keeps the whole question


def question_memo(question: str) -> dict[str, str]:
    return {QUESTION: question[:QUESTION_CHARS]}


async def question_of(execution: WorkflowExecution) -> str | None:
    value = await execution.memo_value(QUESTION, None)
    return value if isinstance(value, str) else None
