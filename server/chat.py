"""``POST /api/chat/stream``: DeerFlow's chat protocol on durable runs.

One request is one DeerFlow turn. A question starts a run (the thread's next one) and streams its
feed until the plan awaits review, the coordinator asks a question, or the run ends. With
``interrupt_feedback`` the feedback goes to the thread's newest run through the validated
``review_plan`` update and the stream resumes after it. A plain message to a run that waits for a
clarification answer is that answer (DeerFlow's clarification turns). Every problem is an
``error`` event in a 200 stream, because DeerFlow's UI drops non-200 answers silently.

DeerFlow's Stop aborts the stream, and DeerFlow stops its graph when its client goes away: so does a
run whose stream's client goes away while it works (before the turn delivered a plan for review, a
question or the report), cancelled in the name of the token's holder (``ChatTurns.client_left``).
The operator may keep runs going instead (``DEERFLOW_WEB_CANCEL_ON_DISCONNECT=false``); then closing
the tab ends the stream, not the run, and ``POST /api/chat/cancel`` cancels it explicitly. A run
that delivered its turn goes on whatever the client does, and any later request (or our page)
shows where it stands.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from config.groups.web import Role
from config.settings import Settings
from runtime import research_client
from runtime.run_memo import started_by
from server import sse
from server.access import Act, Principal
from server.decisions import decided
from server.feed import PAGE_ONLY, FeedItem, follow
from server.live import Previews, TokenHub, with_previews
from server.mcp_settings import DeerFlowMCPSettings, mcp_picks
from server.security import RequestError
from server.threads import ThreadError, checked_thread_id, latest_run, run_count, workflow_id
from server.uploads import Uploads
from workflows.calls.errors import failure_message
from workflows.contracts.decisions import Actor
from workflows.contracts.mcp_choices import IgnoredMCPServer, MCPServerChoice, ignored_mcp_note
from workflows.contracts.research import ResearchRequest
from workflows.contracts.status import Awaiting
from workflows.research.document_names import document_name

logger = logging.getLogger(__name__)


class ChatResource(BaseModel):
    uri: str = Field(max_length=4096)
    title: str = ""


class ChatTurnMessage(BaseModel):
    role: str
    content: str = Field(max_length=20_000)


class ChatStreamRequest(BaseModel):
    """DeerFlow's request body; fields we do not use are ignored. ``mcp_settings`` only picks the
    operator's servers (server/mcp_settings.py)."""

    model_config = ConfigDict(extra="ignore")

    messages: list[ChatTurnMessage] = Field(min_length=1, max_length=50)
    thread_id: str
    interrupt_feedback: str | None = None
    locale: str | None = Field(default=None, max_length=20)
    resources: list[ChatResource] = Field(default_factory=list, max_length=50)
    auto_accepted_plan: bool = False
    enable_clarification: bool = False
    max_clarification_rounds: int = 3
    enable_deep_thinking: bool = False
    enable_background_investigation: bool = True
    enable_web_search: bool = True
    max_plan_iterations: int = 1
    max_step_num: int = 3
    max_search_results: int = 3
    report_style: str = "academic"
    mcp_settings: DeerFlowMCPSettings | None = None

    def question(self) -> str:
        """The turn's text with each ``@`` mention as the document's name: DeerFlow's UI writes a
        mention as ``[title](uri)``, and the uri, a path on the server, went into plan and step titles.
        The run gets the documents themselves in ``resources``."""
        text = self.messages[-1].content
        for resource in self.resources:
            name = resource.title or document_name(resource.uri)
            text = text.replace(f"[{resource.title}]({resource.uri})", name)
        return text

    def research_request(self, mcp_servers: Sequence[MCPServerChoice] = (),
                         ignored_mcp_servers: Sequence[IgnoredMCPServer] = ()) -> ResearchRequest:
        return ResearchRequest.model_validate({
            "question": self.question(), "locale": self.locale,
            "auto_accept_plan": self.auto_accepted_plan, "enable_clarification": self.enable_clarification,
            "max_clarification_rounds": self.max_clarification_rounds,
            "enable_deep_thinking": self.enable_deep_thinking,
            "enable_background_investigation": self.enable_background_investigation,
            "enable_web_search": self.enable_web_search,
            "max_plan_iterations": self.max_plan_iterations, "max_step_num": self.max_step_num,
            "max_search_results": self.max_search_results, "report_style": self.report_style.lower(),
            "resources": [resource.uri for resource in self.resources],
            "mcp_servers": list(mcp_servers), "ignored_mcp_servers": list(ignored_mcp_servers),
        })


FEEDBACK = {"accepted": "[ACCEPTED]", "edit_plan": "[EDIT_PLAN]"}


def feedback_text(choice: str, content: str) -> str:
    """DeerFlow's ``[<interrupt_feedback>] <content>``; the accept turn's greeting is dropped."""
    tag = FEEDBACK.get(choice.strip().lower())
    if tag is None:
        raise RequestError(f"interrupt_feedback must be one of {', '.join(FEEDBACK)}")
    return tag if tag == "[ACCEPTED]" else f"{tag} {content.strip()}"


def problem(error: Exception) -> str:
    if isinstance(error, ValidationError):
        # A model's own check (a fork from a step that names none) has no field to name.
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"]
                         for e in error.errors())
    if isinstance(error, WorkflowUpdateFailedError):
        return f"rejected: {failure_message(error.cause)}"
    if isinstance(error, RPCError):
        return f"Temporal refused the request: {error.message}"
    if isinstance(error, WorkflowUpdateRPCTimeoutOrCancelledError):
        # Admitted, the update may still be handed to the next worker; a second decision on a run
        # that took the first is refused, so resending is safe, but only after a look at the run.
        return ("no worker took the decision in time (is a worker running?); it may still reach the run "
                "when one starts, so reload the run before sending it again")
    return str(error)


@dataclass
class TurnWatch:
    """What one chat request streams, for when its client goes away: the run it follows, once the
    turn has begun, and whether the turn's end was sent (a plan for review, a question, the report,
    the run's end)."""

    following: str | None = None
    delivered: bool = False


class ChatTurns:
    """Starts or resumes the thread's run for one turn, then streams its feed to the turn's end."""

    def __init__(self, client: Client, settings: Settings, hub: TokenHub, uploads: Uploads) -> None:
        self.client = client
        self.settings = settings
        self.prefix = settings.web_thread_prefix
        self.hub = hub
        self.uploads = uploads
        self._cancelling: set[asyncio.Task[None]] = set()  # held until done: the loop keeps only weak references

    async def stream(self, body: Any, keep_alive: float, who: Principal,
                     watch: TurnWatch | None = None) -> AsyncIterator[str]:
        watch = watch or TurnWatch()
        thread_id = str(body.get("thread_id", ""))[:64] if isinstance(body, dict) else ""
        try:
            if isinstance(body, RequestError):
                raise body
            turn = ChatStreamRequest.model_validate(body)
            checked_thread_id(turn.thread_id)
            workflow, run_id, after, notice = await self._begin(turn, who)
        except (RequestError, ThreadError, ValidationError, WorkflowUpdateFailedError,
                WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as error:
            yield sse.event("error", {"thread_id": thread_id, "error": problem(error)})
            return
        if notice:  # said first, as the coordinator's words, which DeerFlow's UI shows as they are
            yield sse.event("message_chunk", {"thread_id": turn.thread_id, "id": f"{workflow}.notice",
                                              "agent": "coordinator", "role": "assistant", "content": notice,
                                              "finish_reason": "stop"})
        watch.following = workflow
        async for chunk in sse.with_keep_alive(self._turn(workflow, run_id, turn.thread_id, after), keep_alive):
            yield chunk
        watch.delivered = True

    def client_left(self, watch: TurnWatch, who: Principal) -> None:
        """The client of a turn went away (DeerFlow's Stop, a closed tab): mid-turn, its run is
        cancelled in ``who``'s name, unless the operator keeps such runs going. In a task of its
        own, since the request's is being torn down."""
        if watch.following is not None and not watch.delivered and self.settings.web_cancel_on_disconnect:
            task = asyncio.create_task(self._cancel_abandoned(watch.following, who))
            self._cancelling.add(task)
            task.add_done_callback(self._cancelling.discard)
        watch.following = None  # once

    async def _cancel_abandoned(self, workflow: str, who: Principal) -> None:
        handle = self.client.get_workflow_handle(workflow)
        try:
            description = await handle.describe()
            if description.status != WorkflowExecutionStatus.RUNNING:
                return  # it ended as the client left
            if not who.may(Act.CANCEL, await started_by(description)):  # a reviewer following another's run
                logger.info("%s left the chat stream of %s, which it may not cancel: the run goes on", who.name,
                            workflow)
                return
            await research_client.cancel(handle, who.actor)
        except RPCError as error:
            logger.warning("Could not cancel %s after its chat stream's client left: %s", workflow, error.message)
            return
        logger.info("Cancelled %s: its chat stream's client (%s) left mid-turn (DeerFlow's Stop)", workflow, who.name)

    async def _turn(self, workflow: str, run_id: str | None, thread_id: str,
                    after: tuple[int, int, int] | None) -> AsyncIterator[str]:
        previews = Previews(thread_id)
        try:
            feed = follow(self.client, workflow, run_id, thread_id, after)
            async for entry in with_previews(feed, self.hub, workflow):
                if not isinstance(entry, FeedItem):
                    if (chunk := previews.preview(entry)) is not None:
                        yield sse.event("message_chunk", chunk)
                    continue
                item = previews.continuation(entry)  # DeerFlow's UI joins chunks by id: send only the rest
                if item.event not in PAGE_ONLY:
                    yield sse.event(item.event, item.data)
                if item.ends_turn:
                    return
        except RPCError as error:  # the run goes on; the page can ask again
            yield sse.event("error", {"thread_id": thread_id, "error": f"the feed was interrupted: {error.message}"})

    async def _begin(self, turn: ChatStreamRequest, who: Principal,
                     ) -> tuple[str, str | None, tuple[int, int, int] | None, str | None]:
        """The run to follow and from where: a new run from its start, or the newest after the
        feedback; each as far as ``who`` may (server/access.py). Last, what to tell first, if anything."""
        if turn.interrupt_feedback:
            handle = await latest_run(self.client, self.prefix, turn.thread_id)
            feedback = feedback_text(turn.interrupt_feedback, turn.messages[-1].content)
            return *await self._send(handle, research_client.review_plan, feedback, who), None
        count = await run_count(self.client, self.prefix, turn.thread_id)
        if count:
            handle = self.client.get_workflow_handle(workflow_id(self.prefix, turn.thread_id, count))
            newest_by = await started_by(await handle.describe())
            if who.may(Act.SEE, newest_by) and await _awaits(handle, Awaiting.CLARIFICATION):
                return *await self._send(handle, research_client.answer_clarification, turn.messages[-1].content,
                                         who), None
            await self._check_owner(turn.thread_id, count, newest_by, who)
        who.check_start()
        chosen, ignored = mcp_picks(turn.mcp_settings, self.settings)
        request = turn.research_request(chosen, ignored)
        self.uploads.check_resources(request.resources, who)
        new_id = workflow_id(self.prefix, turn.thread_id, count + 1)
        try:
            handle = await research_client.start(self.client, request, run_id=new_id,
                                                 summary=f"Research (web): {request.question[:160]}",
                                                 started_by=who.actor)
        except WorkflowAlreadyStartedError as error:
            raise RequestError("another question on this thread is starting; send it again") from error
        return new_id, handle.first_execution_run_id, None, ignored_mcp_note(ignored) if ignored else None

    async def _check_owner(self, thread_id: str, count: int, newest_by: Actor | None, who: Principal) -> None:
        """A thread is the token's that started its first run: only that token asks new questions on
        it. Others act on its runs as their role allows (review, answer, cancel), and a thread they may
        not see is not found. Its first run says who owns it, so a thread another token once took
        over (before this rule) is its owner's again; one whose first run does not say (started
        before runs recorded it, or outside the API server) is the admins', as such runs are."""
        owner = newest_by if count == 1 else await started_by(
            await self.client.get_workflow_handle(workflow_id(self.prefix, thread_id, 1)).describe())
        if owner == who.actor or (owner is None and who.role is Role.ADMIN):
            return
        who.check(Act.SEE, owner)
        started = f"was started by {owner.name!r}" if owner else "was not started through the API server"
        raise RequestError(f"this thread {started}: only the token that starts a thread asks new questions on it; "
                           "start a new chat for yours", 403)

    async def _send(self, handle: WorkflowHandle, update: research_client.Update, value: str,
                    who: Principal) -> tuple[str, str | None, tuple[int, int, int]]:
        description = await handle.describe()
        who.check(Act.DECIDE, await started_by(description))
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise RequestError("this thread's research run has already ended; ask a new question")
        seen = description.raw_description.workflow_execution_info.history_length
        await decided(handle, update, value, who.actor)
        return handle.id, description.run_id, (0, seen, 1 << 30)


async def _awaits(handle: WorkflowHandle, what: Awaiting) -> bool:
    try:
        status = await research_client.status(handle)
    except RPCError:
        return False
    return status.awaiting == what
