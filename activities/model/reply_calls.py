"""A model reply's tool calls, read by one parser whether the reply came whole or streamed.

Why one parser: langchain reads a whole reply's arguments with ``json.loads``, but assembles a
streamed one (token previews stream every turn) by summing chunks, each sum re-reading every call
with its partial-JSON parser. That parser mends what is broken, so ``{"query": "unterminated`` became
a search for "unterminated" instead of the error the agent must read; and the sums are quadratic in
the calls (ours chunk by chunk, langchain's own once the stream ends), so 2,000 calls in one reply held
the worker's event loop for minutes, the attempt's heartbeat timed out, and the retried attempt's
ordinary reply ran instead of the capped flood. A page watching the run changed what the run did.

So langchain parses neither: the whole reply's calls are the provider's message as it was sent
(``clients.py`` takes them out before langchain reads it), a streamed reply's are its pieces joined
by index in one pass (``token_stream.py``), both kept on the message under :data:`RAW_CALLS`, and
:func:`tool_calls` reads them. The same reply gives the same calls, the same invalid ones and so
the same caps and errors in the workflow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage

from workflows.contracts.chat import ToolCall

RAW_CALLS = "deerflow_raw_tool_calls"  # the key of a reply's raw calls in ``AIMessage.additional_kwargs``


@dataclass
class RawCall:
    """One call as the provider sent it: its arguments are the model's text, unread."""

    id: str | None = None
    name: str | None = None
    arguments: str | None = None


@dataclass
class StreamedCall:
    """A streamed call's pieces, joined at the end (a string grown piece by piece is quadratic)."""

    id: str | None = None
    names: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)

    def add(self, piece: dict[str, Any]) -> None:
        self.id = self.id or piece.get("id") or None
        if piece.get("name"):
            self.names.append(str(piece["name"]))
        if piece.get("args"):
            self.arguments.append(str(piece["args"]))

    def joined(self) -> RawCall:
        return RawCall(self.id, "".join(self.names) or None, "".join(self.arguments))


def from_provider(message: dict[str, Any]) -> list[RawCall]:
    """The calls of one choice's ``message`` (OpenAI's shape), taken out of it."""
    calls = []
    for call in message.pop("tool_calls", None) or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(RawCall(_text(call.get("id")), _text(function.get("name")),
                             arguments if isinstance(arguments, str) or arguments is None else json.dumps(arguments)))
    return calls


def with_calls(message: AIMessage, calls: list[RawCall]) -> AIMessage:
    """``message`` carrying ``calls`` for :func:`tool_calls`."""
    message.additional_kwargs[RAW_CALLS] = calls
    return message


def raw_calls(message: AIMessage) -> list[RawCall]:
    return list(message.additional_kwargs.get(RAW_CALLS) or [])


def tool_calls(message: AIMessage) -> list[ToolCall]:
    """The reply's calls: arguments that are a JSON object (or empty, or null: none) are the call's;
    any other text (not JSON, JSON but not an object) is kept as the call's ``invalid_arguments``,
    which the agent loop answers with an error the model reads."""
    calls = []
    for index, raw in enumerate(raw_calls(message)):
        call_id, name = _printable(raw.id or f"call_{index}"), _printable(raw.name or "unknown")
        arguments = _arguments(raw.arguments)
        if arguments is None:
            calls.append(ToolCall(id=call_id, name=name, invalid_arguments=_printable(str(raw.arguments))))
        else:
            calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return calls


def _arguments(text: str | None) -> dict[str, Any] | None:
    """``text`` read as a call's arguments; None when it is not a JSON object (nor empty, nor null).

    Control characters inside strings are accepted, as langchain accepts them (small models write
    raw newlines in values). An object whose strings hold a lone surrogate is refused: it could
    not be encoded into the activity's result, which would fail the turn on every retry.
    """
    if text is None or not text.strip():
        return {}
    try:
        parsed = json.loads(text, strict=False)
        json.dumps(parsed, ensure_ascii=False).encode()
    except (ValueError, RecursionError, UnicodeEncodeError):
        return None
    if parsed is None:
        return {}
    return parsed if isinstance(parsed, dict) else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _printable(text: str) -> str:
    """``text`` with any lone surrogate escaped: history holds UTF-8, which has no encoding for one."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
