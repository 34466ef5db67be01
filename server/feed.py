"""A run's event feed, derived from its Temporal history: nothing is added to the workflow.

Why history rather than feed state in the workflow (a query with a cursor, or workflow streams):
every fact the feed shows is already recorded there (each model turn's request names its agent,
each tool activity its arguments, each result its output, the review wait its timer), so a feed
kept by the workflow would write the same content into history a second time and grow every run.
Derived from history, the feed adds zero bytes to a run, needs no workflow change (replay is
untouched), and is as durable as the run itself: a reconnecting browser or a restarted server
re-reads it and resumes from an offset. Large payloads are claim-checked, so the translator decodes
with the shared data converter, which fetches them from the blob store.

Item ids are ``<run>.<event>.<k>``: the run's position in its continue-as-new chain (from where
the feed started), the history event id and the item's index within that event, so they are
deterministic, ordered and the same on every read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter

from runtime.activity_io import INPUTS, RESULTS, runs_call
from runtime.token_stream_format import stream_id
from workflows.contracts.chat import ChatResponse, ToolCall
from workflows.contracts.decisions import cancel_words
from workflows.contracts.research import Outcome, ResearchResult
from workflows.contracts.tool_activities import CrawlResult, LocalSearchRequest, PythonResult, SearchResponse

# The activities the feed shows; others (run config, MCP listing) are not.
SHOWN = ("chat", "web_search", "crawl_tool", "python_repl_tool", "local_search_tool", "mcp_call_tool")
_INPUTS: dict[str, type[BaseModel]] = {activity: INPUTS[activity] for activity in SHOWN}
_RESULTS: dict[str, type[BaseModel]] = {activity: RESULTS[activity] for activity in SHOWN}
# The review wait is a durable timer with this summary (workflows/research/workflow.py); it marks the interrupt.
PLAN_REVIEW_TIMER = "plan review deadline"
CLARIFICATION_TIMER = "clarification deadline"
INTERRUPT_CONTENT = "Please Review the Plan."
INTERRUPT_OPTIONS = [{"text": "Edit plan", "value": "edit_plan"}, {"text": "Start research", "value": "accepted"}]
# Tool results go to a browser, not to a model: a crawled page is shown in part.
MAX_TOOL_RESULT_CHARS = 4000
# Item types only our page reads; DeerFlow's UI turns unknown types into messages, so never sent there.
PAGE_ONLY = frozenset({"clarification", "done"})


@dataclass(frozen=True)
class FeedItem:
    """One feed event: a DeerFlow SSE ``event`` type and its ``data``."""

    position: tuple[int, int, int]
    event: str
    data: dict[str, Any]
    # The end of a DeerFlow turn: the plan awaits review, a question awaits an answer, or the run ended.
    ends_turn: bool = False

    @property
    def id(self) -> str:
        return ".".join(map(str, self.position))


def parse_position(text: str | None) -> tuple[int, int, int] | None:
    """An item id as sent by a client; anything malformed means "from the start"."""
    if not text:
        return None
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(part.isdigit() and len(part) < 12 for part in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


@dataclass
class _Scheduled:
    activity: str
    request: Any
    call_id: str | None = None
    agent: str | None = None
    activity_id: str = ""
    attempt: int = 1


@dataclass
class _PendingCall:
    call: ToolCall
    agent: str


@dataclass
class Translator:
    """Turns one run chain's history events, in order, into feed items."""

    converter: DataConverter
    thread_id: str
    # Message ids start with the workflow id: a thread's runs share one DeerFlow tab, which keys
    # messages by id, so ids must differ between runs and not only within one.
    workflow_id: str
    ordinal: int = 0
    # This run's id as its activities see it (the started event's), for the previews' stream ids.
    run_id: str = ""
    scheduled: dict[int, _Scheduled] = field(default_factory=dict)
    pending: list[_PendingCall] = field(default_factory=list)
    citations: dict[str, dict[str, str]] = field(default_factory=dict)
    cancel_reason: str | None = None  # of the cancel request, once the run has one

    async def translate(self, event: HistoryEvent) -> list[FeedItem]:
        items: list[tuple[str, dict[str, Any], bool]] = []
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            self.run_id = event.workflow_execution_started_event_attributes.original_execution_run_id
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            await self._scheduled(event)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in self.scheduled:
                self.scheduled[started.scheduled_event_id].attempt = started.attempt
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            items = await self._completed(event.event_id, attributes.scheduled_event_id, attributes.result)
        elif kind in (EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED, EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT):
            failed = kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            attributes = (event.activity_task_failed_event_attributes if failed
                          else event.activity_task_timed_out_event_attributes)
            items = self._tool_failed(attributes.scheduled_event_id, attributes.failure.message)
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            items = await self._timer(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            items = await self._result(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            items = [self._error(f"the run failed: {_root_cause(failure)}")]
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            self.cancel_reason = event.workflow_execution_cancel_requested_event_attributes.cause
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:  # who cancelled it, or why it did
            items = [self._error(cancel_words(self.cancel_reason), reason="cancelled")]
        elif kind in _CLOSED_BADLY:
            items = [self._error(_CLOSED_BADLY[kind])]
        return [FeedItem((self.ordinal, event.event_id, k), name, data, ends)
                for k, (name, data, ends) in enumerate(items)]

    async def _decode(self, payloads: Any, hint: type[BaseModel]) -> Any:
        [value] = await self.converter.decode_wrapper(payloads, [hint])
        return value

    async def _scheduled(self, event: HistoryEvent) -> None:
        attributes = event.activity_task_scheduled_event_attributes
        activity = attributes.activity_type.name
        if activity not in _INPUTS:
            return
        request = await self._decode(attributes.input, _INPUTS[activity])
        entry = _Scheduled(activity, request, activity_id=attributes.activity_id)
        if activity != "chat":
            match = next((p for p in self.pending if runs_call(p.call, activity, request)), None)
            if match is not None:
                self.pending.remove(match)
                entry.call_id, entry.agent = match.call.id, match.agent
        self.scheduled[event.event_id] = entry

    async def _completed(self, event_id: int, scheduled_id: int, result: Any) -> list[tuple[str, dict, bool]]:
        entry = self.scheduled.pop(scheduled_id, None)
        if entry is None:
            return []
        value = await self._decode(result, _RESULTS[entry.activity])
        if entry.activity == "chat":
            preview = stream_id(self.workflow_id, self.run_id, entry.activity_id, entry.attempt)
            return self._message(self._message_id(event_id), entry.request.prompt, value, preview)
        if isinstance(value, SearchResponse):
            for hit in value.results:
                self.citations.setdefault(hit.url, {"url": hit.url, "title": hit.title,
                                                    "description": hit.content[:300]})
        if entry.call_id is None:
            return []  # the background investigation: its sources count, it is not a tool call
        return [("tool_call_result", self._common(entry.call_id, entry.agent) | {
            "tool_call_id": entry.call_id, "content": _tool_text(entry.request, value)}, False)]

    def _tool_failed(self, scheduled_id: int, message: str) -> list[tuple[str, dict, bool]]:
        entry = self.scheduled.pop(scheduled_id, None)
        if entry is None or entry.call_id is None:
            return []
        return [("tool_call_result", self._common(entry.call_id, entry.agent) | {
            "tool_call_id": entry.call_id, "content": f"Error: {message}"}, False)]

    def _message(self, message_id: str, agent: str, response: ChatResponse,
                 preview: str) -> list[tuple[str, dict, bool]]:
        """The model turn's message; ``stream_id`` names the token preview it supersedes (server/live.py)."""
        reply = response.message
        common = self._common(message_id, agent) | {"stream_id": preview}
        question = next((c for c in reply.tool_calls if c.name == "ask_clarification"), None)
        if agent == "coordinator" and question is not None:
            text = str(question.arguments.get("question") or reply.content)
            return [("message_chunk", common | {"content": text, "finish_reason": "stop"}, False)]
        if not reply.tool_calls:
            return [("message_chunk", common | _content(reply.content) | {"finish_reason": "stop"}, False)]
        self.pending.extend(_PendingCall(call, agent) for call in reply.tool_calls)
        calls = [{"type": "tool_call", "id": c.id, "name": c.name, "args": _deerflow_args(c)} for c in reply.tool_calls]
        chunks = [{"type": "tool_call_chunk", "index": i, "id": c.id, "name": c.name,
                   "args": json.dumps(_deerflow_args(c), ensure_ascii=False)} for i, c in enumerate(reply.tool_calls)]
        return [("tool_calls", common | {"tool_calls": calls, "tool_call_chunks": chunks}, False),
                ("message_chunk", common | _content(reply.content) | {"finish_reason": "tool_calls"}, False)]

    async def _timer(self, event: HistoryEvent) -> list[tuple[str, dict, bool]]:
        if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
            return []
        # The whole converter: the SDK passes summaries through the payload codec, so they are
        # ciphertext when encryption is on.
        [summary] = await self.converter.decode([event.user_metadata.summary], [str])
        if summary == PLAN_REVIEW_TIMER:
            interrupt_id = f"human_feedback:{self._message_id(event.event_id)}"
            return [("interrupt", {"thread_id": self.thread_id, "id": interrupt_id,
                                   "role": "assistant", "content": INTERRUPT_CONTENT,
                                   "finish_reason": "interrupt", "options": INTERRUPT_OPTIONS}, True)]
        if summary == CLARIFICATION_TIMER:
            return [("clarification", {"thread_id": self.thread_id}, True)]
        return []

    async def _result(self, event: HistoryEvent) -> list[tuple[str, dict, bool]]:
        result: ResearchResult = await self._decode(
            event.workflow_execution_completed_event_attributes.result, ResearchResult)
        done = ("done", {"thread_id": self.thread_id, "outcome": result.outcome.value}, True)
        if result.outcome is Outcome.FAILED:
            return [self._error(result.error or "the run failed"), done]
        if result.outcome is Outcome.CANCELLED:
            return [self._error(result.report or "the plan was not reviewed in time", reason="cancelled"), done]
        if result.outcome is Outcome.DIRECT_REPLY:
            return [done]
        return [("citations", {"thread_id": self.thread_id, "citations": list(self.citations.values())}, False), done]

    def _error(self, message: str, reason: str | None = None) -> tuple[str, dict, bool]:
        data = {"thread_id": self.thread_id, "error": message} | ({"reason": reason} if reason else {})
        return "error", data, True

    def _message_id(self, event_id: int) -> str:
        return f"{self.workflow_id}/{self.ordinal}.{event_id}"

    def _common(self, message_id: str, agent: str | None) -> dict[str, Any]:
        common = {"thread_id": self.thread_id, "id": message_id, "role": "assistant"}
        return common | ({"agent": agent} if agent else {})


_CLOSED_BADLY = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "the run was terminated",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "the run timed out",
}


def _root_cause(failure: Failure) -> str:
    """The innermost message: "Activity task failed" says less than the error that failed it."""
    while failure.HasField("cause") and failure.cause.message:
        failure = failure.cause
    return failure.message


def _content(text: str) -> dict[str, str]:
    return {"content": text} if text else {}


def _deerflow_args(call: ToolCall) -> dict[str, Any]:
    """A tool call's arguments as DeerFlow's activity cards read them.

    Its retriever card shows ``args.keywords`` (DeerFlow's ``local_search_tool`` argument); ours is
    ``query``, so the card would name no search. Both are sent: our page reads ``query``.
    """
    if call.name == "local_search_tool" and "query" in call.arguments:
        return {"keywords": call.arguments["query"]} | call.arguments
    return call.arguments


def _tool_text(request: Any, value: Any) -> str:
    """A tool's result in the shape DeerFlow's activity cards parse."""
    if isinstance(value, SearchResponse):
        # Pages for the web search card and our page; DeerFlow's retriever card reads its
        # Document.to_dict() ({id, content, url?, title?}), so local results also carry an id.
        local = isinstance(request, LocalSearchRequest)
        return json.dumps([{"type": "page", "title": r.title, "url": r.url, "content": r.content}
                           | ({"id": r.url} if local else {}) for r in value.results], ensure_ascii=False)
    if isinstance(value, PythonResult):
        if value.exit_code == 0 and not value.stopped:
            return f"Successfully executed:\n```python\n{request.code}\n```\nStdout: {value.stdout}"
        return f"Error executing code:\n```python\n{request.code}\n```\nError: {value.stderr or value.stopped}"
    if isinstance(value, CrawlResult):
        return json.dumps({"url": value.url, "crawled_content": value.markdown[:MAX_TOOL_RESULT_CHARS]},
                          ensure_ascii=False)
    return str(getattr(value, "content", ""))[:MAX_TOOL_RESULT_CHARS]


async def follow(client: Client, workflow_id: str, run_id: str | None, thread_id: str,
                 after: tuple[int, int, int] | None = None) -> AsyncIterator[FeedItem]:
    """Every item of a run chain after ``after``, live: long-polls history until the chain ends."""
    translator = Translator(client.data_converter, thread_id, workflow_id)
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        next_run: str | None = None
        async for event in handle.fetch_history_events(wait_new_event=True):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                next_run = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            for item in await translator.translate(event):
                if after is None or item.position > after:
                    yield item
        if next_run is None:
            return
        run_id, translator.ordinal = next_run, translator.ordinal + 1
