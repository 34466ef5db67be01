"""The API's lists of research runs and its decisions on many runs at once (issue #46).

``GET /api/runs`` pages through the server's visibility index with the caller's filters (runtime/
run_listing.py); ``POST /api/runs/review-all`` and ``/api/runs/cancel-all`` act on every run a filter
matches (runtime/bulk_decisions.py). What a caller may see is part of the query: a token that sees
only its own runs has its starter ANDed in (with the runs from before runs were indexed by starter),
and every run is checked again against its memo, which is what access is decided on
(server/access.py): a run the caller may not see is neither listed nor counted, one it may see but
not act on is counted as refused, and a viewer may not act at all.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from runtime.bulk_decisions import BulkOutcome, Verdict, accept_plan, cancel_run, decision_id, for_each, matching
from runtime.run_listing import ListedRun, RunFilter, list_page, owner_scope
from runtime.run_memo import indexes_questions, started_by
from runtime.search_attributes import missing_search_attributes
from runtime.visibility_query import QueryError
from server.access import Act, Principal
from server.decisions import DECISION_WAIT_SECONDS
from server.security import RequestError
from workflows.contracts.status import Awaiting
from workflows.research.visibility import STARTED_BY

PAGE_SIZE = 50
KNOWN_FOR_SECONDS = 60.0  # how long the namespace's search attributes are taken as read


class ReviewAllBody(RunFilter):
    """``review-all``: the filter, ``accept: true`` (a plan is edited one run at a time), and optionally
    ``request_id`` (the same one again attaches to the same decisions: a retry learns what became of
    them and decides nothing twice) and ``wait_seconds`` (for a worker to confirm each, at most the server's)."""

    accept: bool
    request_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    wait_seconds: float = Field(default=DECISION_WAIT_SECONDS, gt=0, le=DECISION_WAIT_SECONDS)


class CancelAllBody(RunFilter):
    """``cancel-all``: the filter, which must name something (every run is ``query``'s to say)."""


class PageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    page_size: int = Field(default=PAGE_SIZE, ge=1, le=500)
    page: str | None = Field(default=None, max_length=3000)


class RunLists:
    def __init__(self, client: Client) -> None:
        self.client = client
        self._starters_indexed: tuple[float, bool] | None = None

    async def _scope(self, who: Principal) -> str | None:
        """The runs ``who`` may see, as a visibility clause: None for roles that see every run, and for
        a namespace that does not index starters (each run's memo is then the only check)."""
        if who.role is not None or not await self._indexes_starters():
            return None
        return owner_scope(who.actor)

    async def _indexes_starters(self) -> bool:
        known = self._starters_indexed
        if known is None or time.monotonic() - known[0] > KNOWN_FOR_SECONDS:
            try:
                indexed = STARTED_BY not in await missing_search_attributes(self.client)
            except (RPCError, ValueError):
                indexed = False
            self._starters_indexed = known = (time.monotonic(), indexed)
        return known[1]

    def _query(self, wanted: RunFilter, scope: str | None) -> str:
        return wanted.visibility_query(scope, question_indexed=indexes_questions(self.client))

    def _keep(self, wanted: RunFilter, who: Principal, run: ListedRun) -> bool:
        return wanted.keeps_question(run.question, indexes_questions(self.client)) and who.may(Act.SEE, run.started_by)

    async def overview(self, who: Principal, params: Mapping[str, str]) -> dict[str, Any]:
        """A page of the runs ``who`` may see that the filters in ``params`` match, newest first."""
        paging = PageParams.model_validate({key: params[key] for key in ("page_size", "page") if key in params})
        wanted = RunFilter.model_validate({key: value for key, value in params.items()
                                           if key not in ("page_size", "page")})
        query = self._query(wanted, await self._scope(who))
        try:
            page = await list_page(self.client, query, paging.page_size, paging.page,
                                   keep=lambda run: self._keep(wanted, who, run))
        except QueryError as error:
            raise RequestError(f"page: {error}") from None
        except RPCError as error:
            raise _refused_query(error) from error
        now = datetime.now(UTC)
        return {"runs": [_row(run, now) for run in page.runs], "next_page": page.next_page}

    async def review_all(self, body: Any, who: Principal) -> dict[str, Any]:
        """Accept the plan of every run waiting for a review that the filter matches and ``who`` may decide."""
        who.check_start()  # a viewer decides nothing (the guard refuses its POSTs before this)
        wanted = ReviewAllBody.model_validate(body)
        if not wanted.accept:
            raise RequestError("send accept: true (a plan is edited one run at a time)")
        if wanted.awaiting not in (None, Awaiting.PLAN_FEEDBACK):
            raise RequestError("review-all decides runs awaiting plan_feedback")
        runs = await self._matching(RunFilter.model_validate(wanted.model_dump(
            exclude={"accept", "request_id", "wait_seconds"}) | {"awaiting": Awaiting.PLAN_FEEDBACK}), who)
        update_id = decision_id(who.actor, wanted.request_id)

        async def decide(execution: WorkflowExecution) -> tuple[Verdict, str] | None:
            return await _as(who, Act.DECIDE, execution, lambda: accept_plan(
                self.client, execution.id, who.actor, wanted.wait_seconds, update_id))

        return _answer(await for_each(runs, decide))

    async def cancel_all(self, body: Any, who: Principal) -> dict[str, Any]:
        """Cancel every running run the filter matches that ``who`` may cancel."""
        who.check_start()
        wanted = CancelAllBody.model_validate(body)
        if wanted == CancelAllBody():
            raise RequestError("name the runs to cancel: a query or a filter (every run needs a query that says so)")
        runs = await self._matching(RunFilter.model_validate(wanted.model_dump() | {"running": True}), who)

        async def cancel(execution: WorkflowExecution) -> tuple[Verdict, str] | None:
            return await _as(who, Act.CANCEL, execution, lambda: cancel_run(self.client, execution.id, who.actor))

        return _answer(await for_each(runs, cancel))

    async def _matching(self, wanted: RunFilter, who: Principal) -> list[WorkflowExecution]:
        try:
            return await matching(self.client, wanted, await self._scope(who))
        except RPCError as error:
            raise _refused_query(error) from error


async def _as(who: Principal, act: Act, execution: WorkflowExecution,
              action: Callable[[], Awaitable[tuple[Verdict, str]]]) -> tuple[Verdict, str] | None:
    """``action`` when ``who`` may ``act`` on the run (its memo says who started it); refused when it may
    only see it; None, neither done nor counted, when it may not even see it."""
    starter = await started_by(execution)
    if not who.may(Act.SEE, starter):
        return None
    if not who.may(act, starter):
        return Verdict.REFUSED, f"the token {who.name!r} ({who.role_label}) may not {act.value} this run"
    return await action()


def _answer(outcome: BulkOutcome) -> dict[str, Any]:
    return {"decided": outcome.decided, "skipped": outcome.skipped, "refused": outcome.refused,
            "pending": outcome.pending, "failed": outcome.failed, "notes": outcome.notes}


def _refused_query(error: RPCError) -> Exception:
    """The server's refusal of a query (an unknown attribute, a value of the wrong type) is the caller's to fix."""
    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        return RequestError(f"query: {error.message}")
    return error


def _row(run: ListedRun, now: datetime) -> dict[str, Any]:
    status = run.execution.status
    return {"id": run.id, "status": status.name.lower() if status else "unknown", "question": run.question,
            "phase": run.phase, "awaiting": run.awaiting, "started_by": str(run.started_by) if run.started_by else None,
            "age_seconds": int((now - run.execution.start_time).total_seconds())}
