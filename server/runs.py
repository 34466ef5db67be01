"""Our page's API: list, start, inspect, review, answer, cancel and follow research runs.

A ``DeepResearchWorkflow`` run in the namespace (the CLI's too) can be opened by whoever its
starter and the caller's role allow (server/access.py); an id naming a run the caller may not see,
or a workflow of another type, is answered as not found, so the server cannot be used to signal or
cancel workflows that are not research runs, nor to learn which runs others started.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError, RPCStatusCode

from activities.guards.secret_scrubber import SecretScrubber
from config.settings import Settings
from runtime import research_client
from runtime.inspection_source import first_run_id, inspect_run
from runtime.retries import retries_of
from runtime.run_memo import started_by
from runtime.run_names import question_slug
from server import sse
from server.access import Act, Principal
from server.decisions import decided
from server.feed import FeedItem, follow, parse_position
from server.live import Previews, TokenHub, with_previews
from server.security import RequestError
from server.threads import workflow_id
from server.uploads import Uploads
from workflows.calls.errors import failure_message
from workflows.contracts.budget import BudgetDecision
from workflows.contracts.research import WORKFLOW_TYPE, ResearchRequest, ResearchResult, ReviewOutcome
from workflows.contracts.status import RunStatus
from workflows.research.review import ACCEPTED, EDIT_PLAN
from workflows.research.status_view import budget_forecast, offline_notice, retry_line, why_cancelled
from workflows.research.visibility import indexed_place

# How long a view waits for a worker to answer a run's status query. With no worker running (a
# deployment whose workers are down) the server holds the query for about 30 s before it fails it;
# the run view shows where the server's index has the run instead, and the page asks again every 5 s.
# A live worker answers in milliseconds, a loaded one replaying a long run in a second or two.
STATUS_WAIT_SECONDS = 10.0


class ReviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accept: bool = False
    edit: str | None = Field(default=None, max_length=10_000)

    def feedback(self) -> str:
        if self.accept == bool(self.edit and self.edit.strip()):
            raise RequestError("send either accept: true or a non-empty edit")
        return ACCEPTED if self.accept else f"{EDIT_PLAN} {self.edit}"


class AnswerBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer: str = Field(min_length=1, max_length=10_000)


class Runs:
    def __init__(self, client: Client, settings: Settings, hub: TokenHub, uploads: Uploads) -> None:
        self.client = client
        self.hub = hub
        self.prefix = settings.web_thread_prefix
        self.uploads = uploads
        self.scrubber = SecretScrubber.for_settings(settings)  # the inspection shows no secret of this process

    async def handle(self, run: str, who: Principal, act: Act = Act.SEE) -> WorkflowHandle:
        """The research run with this workflow id, if ``who`` may ``act`` on it; anything else is
        "not found" (or, for a run ``who`` may see but not change, refused)."""
        return (await self._described(run, who, act))[0]

    async def _described(self, run: str, who: Principal,
                         act: Act) -> tuple[WorkflowHandle, WorkflowExecutionDescription]:
        """:meth:`handle`, with the description it was checked on."""
        if not 0 < len(run) <= 255:
            raise RequestError("no such research run", 404)
        handle = self.client.get_workflow_handle(run, result_type=ResearchResult)
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                raise RequestError("no such research run", 404) from error
            raise
        if description.workflow_type != WORKFLOW_TYPE:
            raise RequestError("no such research run", 404)
        who.check(act, await started_by(description))
        return handle, description

    async def start(self, body: Any, who: Principal) -> str:
        who.check_start()
        if isinstance(body, dict) and "mcp_servers" in body:
            raise RequestError("the page does not pick MCP servers; use the CLI")
        request = ResearchRequest.model_validate(body)
        if request.forked_from is not None:  # the fork door checks that the caller may see the source
            raise RequestError(f"a fork is started with POST /api/runs/{request.forked_from.workflow_id}/fork")
        self.uploads.check_resources(request.resources, who)
        # Named by its question, as the CLI names its runs, for `starter.py list` and the downloads.
        slug = question_slug(request.question, limit=30, ascii_only=True)
        run = workflow_id(self.prefix, f"page-{slug + '-' if slug else ''}{uuid.uuid4().hex[:16]}", 1)
        await research_client.start(self.client, request, run_id=run,
                                    summary=f"Research (web): {request.question[:160]}", started_by=who.actor)
        return run

    async def show(self, run: str, who: Principal) -> dict[str, Any]:
        handle, description = await self._described(run, who, Act.SEE)
        status = await _status(handle)
        shown: dict[str, Any] = {"id": run, "status": description.status.name.lower() if description.status else None,
                                 "run": status.model_dump(mode="json") if status else None, "result": None,
                                 "offline_notice": offline_notice(status) if status else None, "retries": [],
                                 "budget_forecast": budget_forecast(status) if status else [],
                                 "indexed": None, "may": await _may(who, description)}
        if description.status == WorkflowExecutionStatus.RUNNING:
            shown["retries"] = [retry_line(retry, status) for retry in retries_of(description.raw_description)]
            if status is None:  # what the page shows until a worker answers
                phase, awaiting = indexed_place(description.typed_search_attributes)
                shown["indexed"] = {"phase": phase, "awaiting": awaiting}
        if description.status != WorkflowExecutionStatus.RUNNING:
            try:
                result = await handle.result()
                shown["result"] = result.model_dump(mode="json")
            except WorkflowFailureError as error:  # a cancelled run says who cancelled it, or why it did
                why = why_cancelled(status) if status is not None and isinstance(error.cause, CancelledError) else None
                shown["error"] = why or failure_message(error.cause)
        return shown

    async def inspection(self, run: str, who: Principal) -> dict[str, Any]:
        """The run's timeline, call by call (runtime/inspection.py), for whoever may see the run."""
        _, description = await self._described(run, who, Act.SEE)
        found = await inspect_run(self.client, run, "the server", description)
        return self.scrubber.scrub_value(found).model_dump(mode="json")

    async def review(self, run: str, body: Any, who: Principal) -> ReviewOutcome:
        feedback = ReviewBody.model_validate(body).feedback()
        return await decided(await self.handle(run, who, Act.DECIDE), research_client.review_plan, feedback, who.actor)

    async def answer(self, run: str, body: Any, who: Principal) -> ReviewOutcome:
        answer = AnswerBody.model_validate(body).answer
        return await decided(await self.handle(run, who, Act.DECIDE), research_client.answer_clarification, answer,
                             who.actor)

    async def budget(self, run: str, body: Any, who: Principal) -> ReviewOutcome:
        decision = BudgetDecision.model_validate(body)
        return await decided(await self.handle(run, who, Act.DECIDE), research_client.decide_budget, decision,
                             who.actor)

    async def cancel(self, run: str, who: Principal) -> None:
        await research_client.cancel(await self.handle(run, who, Act.CANCEL), who.actor)

    async def events(self, run: str, after: str | None) -> AsyncIterator[str]:
        """The run's whole feed after ``after`` (an item id), with ids, live until the run ends,
        and the token previews of its model turns in between (without ids: they are not resumed)."""
        previews = Previews(run)
        try:
            first = await first_run_id(self.client, run)
            feed = follow(self.client, run, first, run, parse_position(after))
            async for entry in with_previews(feed, self.hub, run):
                if isinstance(entry, FeedItem):
                    yield sse.event(entry.event, previews.final(entry).data, entry.id)
                elif (chunk := previews.preview(entry)) is not None:
                    yield sse.event("message_chunk", chunk)
        except RPCError as error:
            yield sse.event("error", {"thread_id": run, "error": f"the feed was interrupted: {error.message}"})
            return
        yield sse.event("end", {"thread_id": run})


async def _may(who: Principal, description: WorkflowExecutionDescription) -> dict[str, bool]:
    """What the caller may do with the run, so the page offers only that (the routes check again)."""
    starter = await started_by(description)
    return {"decide": who.may(Act.DECIDE, starter), "cancel": who.may(Act.CANCEL, starter),
            "fork": not who.read_only}  # whoever may see a run and start runs may fork it


async def _status(handle: WorkflowHandle) -> RunStatus | None:
    try:
        return await asyncio.wait_for(research_client.status(handle), STATUS_WAIT_SECONDS)
    except (RPCError, TimeoutError):
        return None  # no worker answered in time, or the run's history is gone
