"""The feed's tool cards as DeerFlow's UI reads them, found by running that UI against the server.

No Temporal: history events are built here and fed to the translator. What each card needs is in
../shared/deerflow-web/API.md §4 ("Activities tab cards by tool name"); a mismatch does not fail
in the browser, it shows an empty card, so only a test like this one notices.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.contrib.pydantic import pydantic_data_converter

from config.settings import Settings
from runtime.converter import data_converter
from server.feed import PLAN_REVIEW_TIMER, FeedItem, Translator
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ToolCall
from workflows.contracts.tool_activities import LocalSearchRequest, SearchRequest, SearchResponse, SearchResult

THREAD = "thread_1"


class History:
    """Activity events in the order a run records them, with increasing event ids."""

    def __init__(self) -> None:
        self.translator = Translator(pydantic_data_converter, THREAD, f"deerflow-web-{THREAD}.1")
        self.next_id = 1

    async def _event(self, kind: EventType.ValueType) -> HistoryEvent:
        event = HistoryEvent(event_id=self.next_id, event_type=kind)
        self.next_id += 1
        return event

    async def activity(self, name: str, request: BaseModel, result: BaseModel) -> list[FeedItem]:
        scheduled = await self._event(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        attributes = scheduled.activity_task_scheduled_event_attributes
        attributes.activity_type.name = name
        attributes.input.CopyFrom(await pydantic_data_converter.encode_wrapper([request]))
        completed = await self._event(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
        done = completed.activity_task_completed_event_attributes
        done.scheduled_event_id = scheduled.event_id
        done.result.CopyFrom(await pydantic_data_converter.encode_wrapper([result]))
        return await self.translator.translate(scheduled) + await self.translator.translate(completed)

    async def tool_turn(self, call: ToolCall) -> list[FeedItem]:
        """A researcher turn that makes ``call``."""
        reply = ChatMessage(role="assistant", tool_calls=[call])
        return await self.activity("chat", ChatRequest(prompt="researcher"), ChatResponse(message=reply))


def parsed_args(items: list[FeedItem]) -> dict[str, Any]:
    """A call's arguments as the UI ends up with them: on the message's finish it re-parses the
    joined ``tool_call_chunks`` args and replaces ``tool_calls[].args`` with them."""
    [calls] = [item.data for item in items if item.event == "tool_calls"]
    [chunk] = calls["tool_call_chunks"]
    assert calls["tool_calls"][0]["args"] == json.loads(chunk["args"])
    return dict(json.loads(chunk["args"]))


async def test_the_retriever_card_gets_its_keywords_and_documents() -> None:
    history = History()
    call = ToolCall(id="call_1", name="local_search_tool", arguments={"query": "solid-state costs"})
    args = parsed_args(await history.tool_turn(call))
    # DeerFlow's card shows args.keywords; our page reads args.query.
    assert args["keywords"] == "solid-state costs" and args["query"] == "solid-state costs"

    hit = SearchResult(title="Battery notes", url="file:///docs/notes.md#chunk-1", content="Costs remain high.")
    [result] = await history.activity(
        "local_search_tool", LocalSearchRequest(query="solid-state costs", resources=["/docs/notes.md"]),
        SearchResponse(query="solid-state costs", results=[hit]))
    assert result.event == "tool_call_result" and result.data["tool_call_id"] == "call_1"
    # DeerFlow's retriever returns Document.to_dict(): {id, content, url?, title?}.
    [document] = json.loads(result.data["content"])
    assert document["id"] == hit.url and document["title"] == hit.title and document["content"] == hit.content


async def test_the_web_search_card_gets_its_query_and_pages_unchanged() -> None:
    history = History()
    call = ToolCall(id="call_1", name="web_search", arguments={"query": "solid-state batteries"})
    assert parsed_args(await history.tool_turn(call)) == {"query": "solid-state batteries"}

    hit = SearchResult(title="Outlook", url="https://example.org/outlook", content="Promising.")
    [result] = await history.activity("web_search", SearchRequest(query="solid-state batteries"),
                                      SearchResponse(query="solid-state batteries", results=[hit]))
    assert json.loads(result.data["content"]) == [
        {"type": "page", "title": "Outlook", "url": "https://example.org/outlook", "content": "Promising."}]


async def test_an_encrypted_run_still_shows_the_plan_review_interrupt(tmp_path: Path) -> None:
    """The SDK passes timer summaries through the payload codec: with encryption on, the feed must
    decrypt the plan-review timer's summary, or DeerFlow's UI never gets its review buttons."""
    settings = Settings.model_validate({"DEERFLOW_HOME": str(tmp_path),
                                        "DEERFLOW_ENCRYPTION_KEYS": f"k1:{base64.b64encode(os.urandom(32)).decode()}"})
    converter = data_converter(settings)
    timer = HistoryEvent(event_id=1, event_type=EventType.EVENT_TYPE_TIMER_STARTED)
    [summary] = await converter.encode([PLAN_REVIEW_TIMER])
    assert PLAN_REVIEW_TIMER.encode() not in summary.data
    timer.user_metadata.summary.CopyFrom(summary)

    items = await Translator(converter, THREAD, f"deerflow-web-{THREAD}.1").translate(timer)

    assert [item.event for item in items] == ["interrupt"]
