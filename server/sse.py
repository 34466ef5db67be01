"""Server-sent events as DeerFlow's client parses them, with keep-alive comments while a run works.

DeerFlow's parser splits on a blank line, needs ``key: value`` with the space and ignores comment
lines, so the keep-alive is ``: ping``. Lines end in ``\\n`` only (its parser does not accept ``\\r\\n``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

KEEP_ALIVE = ": ping\n\n"


class BrokenStream(Exception):
    """Raised by a stream whose answer failed after it began: its response ends unfinished
    (``services.EventStreamResponse``), as DeerFlow's own server's does, so the client's reader fails
    instead of reading an ``error`` event as part of the answer."""


def event(name: str, data: dict[str, Any], event_id: str | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def with_keep_alive(source: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """``source``'s chunks, with a keep-alive comment whenever it is quiet for ``interval`` seconds.

    The source runs in its own task, so waiting for the next chunk never cancels its long poll.
    """
    queue: asyncio.Queue[tuple[str | None, BaseException | None]] = asyncio.Queue(maxsize=64)

    async def pump() -> None:
        try:
            async for chunk in source:
                await queue.put((chunk, None))
            await queue.put((None, None))
        except Exception as error:  # handed to the consumer, which reports it
            await queue.put((None, error))

    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                chunk, error = await asyncio.wait_for(queue.get(), interval)
            except TimeoutError:
                yield KEEP_ALIVE
                continue
            if error is not None:
                raise error
            if chunk is None:
                return
            yield chunk
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


class StreamLimit:
    """At most ``limit`` streams open at once (``DEERFLOW_WEB_MAX_STREAMS``): each holds a task
    and a long poll on Temporal for as long as its client stays, so their number is the operator's.

    A stream counts from its first read to its end; one over the limit gets an ``error`` event.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    async def bounded(self, source: AsyncIterator[str], thread_id: str) -> AsyncIterator[str]:
        if self.open >= self.limit:
            yield event("error", {"thread_id": thread_id,
                                  "error": f"the server has {self.limit} streams open, its limit; try again later"})
            return
        self.open += 1
        try:
            async for chunk in source:
                yield chunk
        finally:
            self.open -= 1
