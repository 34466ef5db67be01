"""What a listing of runs carries about each: its question, who started it and what it spent (the
memo), and the search attributes its starter sets (who started it, its question).

Our page's run list shows each run by its question. The workflow input holds it too, but reading
it there costs a history fetch per run; a memo comes with ``list_workflows`` itself. Every starter
of research runs (the page, DeerFlow's chat endpoint, ``starter.py run``) sets it; a run started
before it existed has none and is listed by its id. The content flows' starters (the API's content
routes and ``starter.py evaluate|slides|podcast``) set ``started_by`` alone. The run adds what it has
spent (``usage``, with its phase), so the spend column and ``costs`` need no query per run either.

Who started the run (``started_by``, an ``Actor``) decides which named API tokens may see and act on
it (server/access.py); a run without one (started before, or by the ``temporal`` CLI) is seen only by
roles that see every run. The same is indexed as ``DeerFlowStartedBy`` so a listing can be narrowed
to a holder's runs by the server; the memo stays what access is decided on (anyone who may start
workflows may set a search attribute). The question is indexed too (``DeerFlowQuestion``, full
text), except where payloads are encrypted: the index is plaintext in the server's database.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from runtime.converter import encryption_of
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.fork_point import ForkPoint
from workflows.contracts.usage import Usage
from workflows.research.visibility import QUESTION as QUESTION_KEY
from workflows.research.visibility import STARTED_BY as STARTED_BY_KEY

QUESTION = "question"
STARTED_BY = "started_by"
FORKED_FROM = "forked_from"  # a fork's source and point: {"workflow_id": …, "at": "step 2"} (runtime/forks.py)
QUESTION_CHARS = 500  # a list entry, not the record: the input keeps the whole question
QUESTION_BYTES = 1_000  # of UTF-8 in the index: the server refuses an attribute over 2 KiB


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


def indexes_questions(client: Client) -> bool:
    """Whether runs started through ``client`` have their question indexed: not where payloads are
    encrypted (the index is plaintext in the server's database)."""
    return encryption_of(client.data_converter.payload_codec) is None


def start_attributes(question: str, started_by: Actor, *, index_question: bool) -> TypedSearchAttributes:
    """The search attributes a starter sets: who started the run, and its question unless told not to."""
    pairs: list[SearchAttributePair[str]] = [SearchAttributePair(STARTED_BY_KEY, starter_keyword(started_by))]
    if index_question:
        pairs.append(SearchAttributePair(QUESTION_KEY, question.encode()[:QUESTION_BYTES].decode(errors="ignore")))
    return TypedSearchAttributes(pairs)


def starter_keyword(actor: Actor) -> str:
    """``via:name``, the name percent-encoded beyond letters, digits and `` .-_@+``: the server
    matches no keyword holding a quote or a backslash by equality, and a holder named ``o"brien``
    must still find its runs."""
    return f"{actor.via.value}:{quote(actor.name, safe=' .-_@+')}"


def starter_keywords(name: str) -> list[str]:
    """The keywords a filter by starter matches: ``alice`` through any door, ``alice (api)`` through that one."""
    for via in Via:
        if name.endswith(suffix := f" ({via.value})"):
            return [starter_keyword(Actor(name=name.removesuffix(suffix), via=via))]
    return [starter_keyword(Actor(name=name, via=via)) for via in Via]


async def started_by(execution: WorkflowExecution | WorkflowExecutionDescription) -> Actor | None:
    """Who started the run, as its memo says (None: it does not say)."""
    return actor_in(await execution.memo_value(STARTED_BY, None))


def actor_in(value: object) -> Actor | None:
    """A memo's ``started_by`` value as an ``Actor`` (None: absent, or not one)."""
    try:
        return Actor.model_validate(value) if value is not None else None
    except ValidationError:
        return None


def question_in(value: object) -> str | None:
    return value if isinstance(value, str) else None


def usage_in(value: object) -> Usage | None:
    """A memo's ``usage`` value as a ``Usage``: what the run had spent at its last phase change (None:
    absent, a run from before, a content flow, or not one)."""
    try:
        return Usage.model_validate(value) if value is not None else None
    except ValidationError:
        return None
