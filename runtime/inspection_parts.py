"""An activity's decoded input and output as readable parts (runtime/inspection_model.py: ``Part``).

Why parts rather than each activity's own model: the terminal, the HTML page and the page's
timeline then render one shape (a label and a text) instead of knowing every activity, while the
parts keep what a person debugging a run reads: the model's messages and reply, each tool call
and its arguments, each search result, a crawled page's text, the code and its output.

An agent sends its whole conversation again on every turn; a turn whose messages begin with the
previous turn's (of the same agent in the same step) shows only what is new, with a line saying
where the rest is. Everything here is linear in the text it is given.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from runtime.inspection_model import Part
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse
from workflows.contracts.tool_activities import (
    CrawlRequest,
    CrawlResult,
    LocalSearchRequest,
    MCPCallRequest,
    MCPCallResult,
    PythonRequest,
    PythonResult,
    SearchRequest,
    SearchResponse,
)
from workflows.research.document_names import document_name


def as_json(value: Any) -> str:
    """Any decoded value as indented JSON (pydantic models by their fields)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


class Conversations:
    """The last request of each agent's conversation, to show a turn's new messages only."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, list[ChatMessage]]] = {}

    def request_parts(self, title: str, request: ChatRequest) -> list[Part]:
        tier = f"{request.model_tier.value} model" + (" · JSON mode" if request.json_mode else "")
        parts = [Part(label="prompt", text=f"prompts/{request.prompt}.md, rendered by the worker · {tier}")]
        if request.prompt_vars:
            parts.append(Part(label="prompt variables", text=as_json(request.prompt_vars), format="json"))
        if request.tools:
            parts.append(Part(label="tools offered", text=", ".join(tool.name for tool in request.tools)))
        # A step's agent is one conversation across its turns; the planner one across its versions.
        thread = title.rsplit(" · turn ", 1)[0] if " · turn " in title else title.partition(" · ")[0]
        earlier = self._last.get(thread)
        self._last[thread] = (title, request.messages)
        messages, first = request.messages, 1
        if earlier is not None and _starts_with(request.messages, earlier[1]):
            first = len(earlier[1]) + 1
            messages = request.messages[first - 1:]
            parts.append(Part(label="earlier messages", text=f"Messages 1-{first - 1}: as in {earlier[0]}"))
        for number, message in enumerate(messages, start=first):
            parts += message_parts(number, message)
        return parts


def _starts_with(messages: list[ChatMessage], prefix: list[ChatMessage]) -> bool:
    return bool(prefix) and len(prefix) <= len(messages) and all(
        mine == theirs for mine, theirs in zip(messages, prefix, strict=False))


def message_parts(number: int, message: ChatMessage) -> list[Part]:
    """One chat message: its text, then each tool call it makes."""
    who = message.role + (f" · {message.name}" if message.name else "")
    if message.tool_call_id:
        who += f" · answers {message.tool_call_id}"
    parts = [Part(label=f"{number}. {who}", text=message.content, format="markdown")] if message.content else []
    return parts + [tool_call_part(call, f"{number}. {who} · ") for call in message.tool_calls]


def tool_call_part(call: Any, prefix: str = "") -> Part:
    text = call.invalid_arguments if call.invalid_arguments is not None else as_json(call.arguments)
    return Part(label=f"{prefix}tool call · {call.name} ({call.id})", text=text, format="json")


def reply_parts(response: ChatResponse) -> list[Part]:
    parts = [Part(label="reply", text=response.message.content, format="markdown")] if response.message.content else []
    parts += [tool_call_part(call) for call in response.message.tool_calls]
    ending = f"finish reason: {response.finish_reason or 'not given'}"
    if response.truncated:
        ending += f" · cut at its output cap ({response.output_cap} tokens)"
    return [*parts, Part(label="ending", text=ending)]


def search_parts(response: SearchResponse) -> list[Part]:
    if not response.results:
        return [Part(label="results", text="(none)")]
    parts = []
    for number, hit in enumerate(response.results, start=1):
        text = f"{hit.url}\n\n{hit.content}"
        if hit.raw_content:
            text += f"\n\n--- page text ---\n{hit.raw_content}"
        parts.append(Part(label=f"result {number} · {hit.title}", text=text, format="markdown"))
    return parts


def input_parts(activity: str, title: str, value: Any, conversations: Conversations) -> list[Part]:
    """A call's decoded input, readable."""
    if isinstance(value, ChatRequest):
        return conversations.request_parts(title, value)
    if isinstance(value, SearchRequest | LocalSearchRequest):
        documents = value.resources if isinstance(value, LocalSearchRequest) else []
        where = f" · in {', '.join(map(document_name, documents))}" if documents else ""
        return [Part(label="query", text=f"{value.query}{where} · at most {value.max_results} results")]
    if isinstance(value, CrawlRequest):
        return [Part(label="url", text=value.url)]
    if isinstance(value, PythonRequest):
        return [Part(label="code", text=value.code, format="code")]
    if isinstance(value, MCPCallRequest):
        return [Part(label=f"{value.server_name}.{value.tool}", text=as_json(value.arguments), format="json")]
    return [Part(label="input", text=as_json(value), format="json")]


def output_parts(value: Any) -> list[Part]:
    """A call's decoded result, readable."""
    if isinstance(value, ChatResponse):
        return reply_parts(value)
    if isinstance(value, SearchResponse):
        return search_parts(value)
    if isinstance(value, CrawlResult):
        cut = " (cut at the crawl limit)" if value.truncated else ""
        return [Part(label=f"page · {value.title or '(no title)'}{cut}", text=f"{value.url}\n\n{value.markdown}",
                     format="markdown")]
    if isinstance(value, PythonResult):
        ending = f"exit code {value.exit_code}" + (f" · stopped: {value.stopped}" if value.stopped else "")
        parts = [Part(label="stdout", text=value.stdout, format="code")] if value.stdout else []
        parts += [Part(label="stderr", text=value.stderr, format="code")] if value.stderr else []
        return [*parts, Part(label="ending", text=f"{ending} · {value.duration_seconds:.2f} s")]
    if isinstance(value, MCPCallResult):
        return [Part(label="error" if value.is_error else "content", text=value.content, format="markdown")]
    return [Part(label="result", text=as_json(value), format="json")]
