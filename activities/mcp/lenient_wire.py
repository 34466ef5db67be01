"""What an MCP server writes, read as other JSON from outsiders is: a lone surrogate is U+FFFD.

Why: the SDK parses each message with pydantic's strict JSON parser, which refuses a lone
surrogate's escape (``"\\ud83d"``: what JavaScript's ``JSON.stringify`` writes for a string cut
between the halves of a pair, an emoji sliced at a length limit). The transport hands the failure
on as a value and the session drops it, so the request it answered waited out its deadline (60 s
for a call, 20 s for a listing) on every attempt, and the tool's output never reached the agent.
:class:`MendingReadStream` sits between the transport and the session: a message the strict parser
refused is read again by ``json.loads`` (which takes the escape), every lone surrogate in it becomes
U+FFFD (``workflows/untrusted_text.py``, as for search results and model replies), and the message
goes on. Bytes that are not UTF-8 are the stdio transport's to replace (``session.py``); over HTTP
the client decodes them with replacement.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any

from mcp import types as mcp_types
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from workflows.untrusted_text import nested_deeper, scrubbed

Item = SessionMessage | Exception
# Deeper than any message of the protocol: a value nested further is left refused (walking it could
# reach the recursion limit, in pydantic's validation or in the payload's serializer).
MAX_MESSAGE_DEPTH = 64


def mended(item: Item) -> Item:
    """``item``, or the message a refused line held, read leniently; the refusal when it held none."""
    if not isinstance(item, ValidationError) or item.error_count() != 1:
        return item
    error = item.errors()[0]
    line = error.get("input")
    if error["type"] != "json_invalid" or not isinstance(line, str | bytes):
        return item
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return item
    if nested_deeper(value, MAX_MESSAGE_DEPTH):
        return item
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(scrubbed(value), by_name=False))
    except ValidationError:
        return item


class MendingReadStream:
    """The transport's read stream, each item passed through :func:`mended` (the SDK's ``ReadStream``)."""

    def __init__(self, inner: ReadStream[Item]) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        """The sender's context, which the session reads off the stream when a transport keeps one."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Item:
        return mended(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> MendingReadStream:
        return self

    async def __anext__(self) -> Item:
        return mended(await self._inner.__anext__())

    async def __aenter__(self) -> MendingReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()
