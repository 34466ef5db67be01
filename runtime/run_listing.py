"""Research runs listed through the server's visibility index, a page at a time: what ``starter.py
list``, ``costs``, the page's list and the bulk decisions read (issue #46).

Why: with a thousand runs paused for days, a list that asks each run (a status query is a replay
on a worker, a result a history read) takes minutes. Everything a row shows comes with the listing
itself: the phase and what a run awaits (search attributes the run upserts), its question, who
started it and what it has spent (its memo), how it stands or ended (the server's status). A filter
is a visibility query, so the server pages through the matches; nothing reads every run.

A filter is built here from typed fields (``RunFilter``), and a person's own query is read and
written back by runtime/visibility_query.py, so a query can only narrow what the caller may see.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from runtime.memo_listing import memo_fields
from runtime.run_memo import QUESTION as QUESTION_MEMO
from runtime.run_memo import STARTED_BY as STARTED_BY_MEMO
from runtime.run_memo import actor_in, question_in, starter_keyword, starter_keywords
from runtime.visibility_query import MAX_QUERY_CHARS, QueryError, all_of, canonical_query, instant, one_of, quoted
from workflows.contracts.decisions import Actor
from workflows.contracts.research import WORKFLOW_TYPE
from workflows.contracts.status import Awaiting, Phase
from workflows.research.visibility import AWAITING, PHASE, QUESTION, STARTED_BY

MAX_PAGE = 500
MAX_WORDS = 10  # of a question filter
MAX_AGE = timedelta(days=3650)
RUNNING = "ExecutionStatus = 'Running'"
ENDED_PHASES = {Phase.COMPLETED, Phase.FAILED}
_PAGE_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,2000}={0,2}")


class RunFilter(BaseModel):
    """Which runs a list shows (every field narrows it). A phase other than completed or failed, and
    what a run awaits, hold for running runs only: a run cancelled while it waited keeps them indexed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase | None = None
    awaiting: Awaiting | None = None
    started_by: str | None = Field(default=None, min_length=1, max_length=80)  # "alice" or "alice (api)"
    question: str | None = Field(default=None, max_length=500)  # words the question holds, all of them
    since: timedelta | None = Field(default=None, gt=timedelta(0), le=MAX_AGE)  # started within
    older_than: timedelta | None = Field(default=None, gt=timedelta(0), le=MAX_AGE)  # started before now - this
    running: bool = False
    query: str | None = Field(default=None, max_length=MAX_QUERY_CHARS)  # a person's own visibility query

    @field_validator("since", "older_than", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        """Seconds as a query parameter gives them (``"3600"``), or ISO 8601 (``P7D``), or a ``timedelta``."""
        return float(value) if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*", value) else value

    @field_validator("query")
    @classmethod
    def _readable(cls, query: str | None) -> str | None:
        return canonical_query(query) if query is not None and query.strip() else None

    @field_validator("started_by")
    @classmethod
    def _a_name(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                starter_keywords(name)
            except ValidationError:
                raise ValueError("a name of at most 64 characters, without control characters") from None
        return name

    def words(self) -> list[str]:
        return re.findall(r"\w+", self.question or "")[:MAX_WORDS]

    def clauses(self, now: datetime, question_indexed: bool = True) -> list[str]:
        """Visibility clauses, each one expression (ANDed by the caller)."""
        clauses = [f"WorkflowType = {quoted(WORKFLOW_TYPE)}"]
        if self.running or self.awaiting or (self.phase and self.phase not in ENDED_PHASES):
            clauses.append(RUNNING)
        if self.phase:
            clauses.append(f"{PHASE.name} = {quoted(self.phase.value)}")
        if self.awaiting:
            clauses.append(f"{AWAITING.name} = {quoted(self.awaiting.value)}")
        if self.started_by:
            clauses.append(one_of(STARTED_BY.name, starter_keywords(self.started_by)))
        if question_indexed:
            clauses += [f"{QUESTION.name} = {quoted(word)}" for word in self.words()]
        if self.since:
            clauses.append(f"StartTime > {quoted(instant(now - self.since))}")
        if self.older_than:
            clauses.append(f"StartTime < {quoted(instant(now - self.older_than))}")
        if self.query:
            clauses.append(self.query)
        return clauses

    def visibility_query(self, scope: str | None = None, question_indexed: bool = True) -> str:
        """The whole query: our clauses, the person's, and ``scope`` (whose runs the caller may see)."""
        return all_of(*self.clauses(datetime.now(UTC), question_indexed), scope or "")

    def matches_question(self, question: str | None) -> bool:
        """Whether the question holds every word of the filter (where the index does not keep questions)."""
        held = {word.casefold() for word in re.findall(r"\w+", question or "")}
        return all(word.casefold() in held for word in self.words())

    def keeps_question(self, question: str | None, question_indexed: bool) -> bool:
        """Whether a listed run with ``question`` passes the question filter: where the index keeps
        questions, the query held it to them already (``clauses``); else its words are checked here.
        What every listing keeps (the API's, ``starter.py list`` and ``costs``)."""
        return question_indexed or self.matches_question(question)


def owner_scope(actor: Actor) -> str:
    """The runs ``actor`` started, and those started before runs were indexed by starter (the caller
    then checks their memo): the scope of a holder that sees its own runs only."""
    return f"{STARTED_BY.name} = {quoted(starter_keyword(actor))} OR {STARTED_BY.name} IS NULL"


@dataclass(frozen=True)
class ListedRun:
    """One run as a listing shows it, read from the listing alone (its spend: cli/costs.py usages)."""

    execution: WorkflowExecution
    question: str | None
    started_by: Actor | None

    @property
    def id(self) -> str:
        return self.execution.id

    @property
    def running(self) -> bool:
        return self.execution.status == WorkflowExecutionStatus.RUNNING

    @property
    def phase(self) -> str | None:
        return self.execution.typed_search_attributes.get(PHASE)

    @property
    def awaiting(self) -> str | None:
        """What the run awaits; None once it ended, whatever the index kept."""
        return (self.execution.typed_search_attributes.get(AWAITING) or None) if self.running else None


@dataclass(frozen=True)
class Page:
    runs: list[ListedRun]
    next_page: str | None  # for the next call; None: this was the last page


async def list_page(client: Client, query: str, page_size: int, page: str | None = None,
                    keep: Callable[[ListedRun], bool] = lambda _: True) -> Page:
    """One page of the runs ``query`` matches (newest first, as the server orders them), those
    ``keep`` refuses left out. Raises ``QueryError`` for a page token that is not one."""
    iterator = client.list_workflows(query, page_size=min(page_size, MAX_PAGE), next_page_token=read_token(page))
    await iterator.fetch_next_page()
    executions = iterator.current_page or []
    # One converter for the page's memos, not one per run and field (runtime/memo_listing.py).
    keys = (QUESTION_MEMO, STARTED_BY_MEMO)
    memos = await memo_fields(client, [execution.raw_info for execution in executions], keys)
    runs = [ListedRun(execution, question_in(memo.get(QUESTION_MEMO)), actor_in(memo.get(STARTED_BY_MEMO)))
            for execution, memo in zip(executions, memos, strict=True)]
    token = iterator.next_page_token
    return Page([run for run in runs if keep(run)], base64.urlsafe_b64encode(token).decode() if token else None)


def read_token(page: str | None) -> bytes | None:
    """A page token as the server gave it (this module hands it out in URL-safe base64)."""
    if not page:
        return None
    if not _PAGE_TOKEN.fullmatch(page):
        raise QueryError("that is not a page token from this list")
    try:
        return base64.urlsafe_b64decode(page)
    except (binascii.Error, ValueError) as error:
        raise QueryError("that is not a page token from this list") from error
