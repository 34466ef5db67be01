"""What an MCP server writes, read as other JSON from outsiders is: a lone surrogate is U+FFFD.

Why: the SDK parses each message with pydantic's strict JSON parser, which refuses a lone
surrogate's escape (``"\\ud83d"``: what JavaScript's ``JSON.stringify`` writes for a string cut
between the halves of a pair, an emoji sliced at a length limit). The transport hands the failure
on as a value and the session drops it, so the request it answered waited out its deadline (60 s
for a call, 20 s for a listing) on every attempt, and the tool's output never reached the agent.
:class:`MendingReadStream` sits between the transport and the session: a message the strict parser
refused is read again by ``json.loads`` (which takes the escape), every lone surrogate in it becomes
U+FFFD (``workflows/text/untrusted_text.py``, as for search results and model replies), and the message
goes on. Bytes that are not UTF-8 are the stdio transport's to replace (``session.py``).

Over HTTP (streamable HTTP, SSE) the transport turned a refused answer into a parse error for its
request, so a listing failed and no call got through: :class:`MendingTransport`, under the session's
HTTP client, reads each JSON body and each event's ``data:`` line the same way before the SDK sees
it (an event line longer than :data:`MAX_MENDED_LINE`, or a compressed body, is left as it came).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx2
from mcp import types as mcp_types
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from pydantic import TypeAdapter, ValidationError

from workflows.text.untrusted_text import nested_deeper, scrubbed

Item = SessionMessage | Exception
# Deeper than any message of the protocol: a value nested further is left refused (walking it could
# reach the recursion limit, in pydantic's validation or in the payload's serializer).
MAX_MESSAGE_DEPTH = 64


# An event line held whole to be mended at most this long (the SDK's own cap on an event is 1 MiB).
MAX_MENDED_LINE = 4 * 1024 * 1024
# pydantic's own JSON parser, the one the SDK reads each message with: what it takes needs no mending.
_STRICT_JSON: TypeAdapter[Any] = TypeAdapter(Any)


def _read_leniently(line: str | bytes) -> dict[str, Any] | None:
    """The JSON object ``line`` holds, its lone surrogates and broken bytes as U+FFFD; None if none."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or nested_deeper(value, MAX_MESSAGE_DEPTH):
        return None
    return scrubbed(value)


def mended(item: Item) -> Item:
    """``item``, or the message a refused line held, read leniently; the refusal when it held none."""
    if not isinstance(item, ValidationError) or item.error_count() != 1:
        return item
    error = item.errors()[0]
    line = error.get("input")
    value = _read_leniently(line) if error["type"] == "json_invalid" and isinstance(line, str | bytes) else None
    if value is None:
        return item
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(value, by_name=False))
    except ValidationError:
        return item


def mended_json(data: bytes) -> bytes:
    """``data`` as it came when the strict parser takes it; else the object it holds, read leniently,
    written again (``data`` as it came when it holds none)."""
    try:
        _STRICT_JSON.validate_json(data)
    except ValueError:
        value = _read_leniently(data)
        return data if value is None else json.dumps(value, ensure_ascii=False).encode("utf-8")
    return data


def _mended_event_line(line: bytes) -> bytes:
    """An SSE line, its ``data:`` field mended (a line's own ``\\r`` and the field's one space kept)."""
    if not line.startswith(b"data:"):
        return line
    end = b"\r" if line.endswith(b"\r") else b""
    field = line[5:len(line) - len(end)]
    space = b" " if field.startswith(b" ") else b""
    return b"data:" + space + mended_json(field[len(space):]) + end


class _MendedEvents(httpx2.AsyncByteStream):
    """An event stream's bytes, line by line, each ``data:`` line mended."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        held: list[bytes] = []  # the line begun, in pieces (joined once, at its end: never quadratic)
        size = 0
        async for chunk in self._inner:
            *ended, rest = chunk.split(b"\n")
            for line in ended:
                yield _mended_event_line(b"".join([*held, line])) + b"\n"
                held, size = [], 0
            if size + len(rest) > MAX_MENDED_LINE:  # too long to hold: passed on as it comes
                yield b"".join([*held, rest])
                held, size = [], 0
            elif rest:
                held.append(rest)
                size += len(rest)
        if held:
            yield b"".join(held)

    async def aclose(self) -> None:
        await self._inner.aclose()


class MendingTransport(httpx2.AsyncBaseTransport):
    """``inner``, its JSON bodies and event streams mended (compressed ones are left as they came)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if response.headers.get("content-encoding") or kind not in ("application/json", "text/event-stream"):
            return response
        headers = [(name, value) for name, value in response.headers.multi_items() if name.lower() != "content-length"]
        if kind == "application/json":
            body = mended_json(await response.aread())
            return httpx2.Response(response.status_code, headers=headers, content=body, request=request,
                                   extensions=response.extensions)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(response.status_code, headers=headers, stream=_MendedEvents(response.stream),
                               request=request, extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


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
