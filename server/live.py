"""Token previews in the API server: taken from workers, handed to the pages following the run.

Workers post previews to ``/internal/token-stream`` (activities/model/token_stream.py) with the shared
token. The hub keeps no state beyond the streams open right now: a preview reaches the pages that
follow its run at that moment, and is gone. Each stream then merges previews into the durable
feed (:func:`with_previews`). A preview message has the id of its attempt's stream and
``"preview": true`` and no SSE id (so no page resumes from it); the feed's final message carries
the same id as ``stream_id`` and supersedes it. A preview that arrives after its final message,
or with a gap (a delta dropped by a full queue), ends that stream's preview on that connection,
so what a page holds is always a prefix of the final text.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from config.settings import Settings
from runtime.token_stream_format import Delta
from server.feed import FeedItem

# Deltas waiting for one slow page before that page misses some (and its previews stop).
SUBSCRIBER_QUEUE = 1024
MAX_DELTAS = 256


class Ingest(BaseModel):
    deltas: list[Delta] = Field(max_length=MAX_DELTAS)


class TokenHub:
    """Fans previews out to the streams following each workflow, never waiting for a slow one."""

    def __init__(self, settings: Settings) -> None:
        # The operator's shared token, else one made for this process (``serve`` announces it).
        self.token = settings.token_stream_token or secrets.token_urlsafe(32)
        self._subscribers: dict[str, set[asyncio.Queue[Delta | FeedItem | None]]] = {}

    def authorised(self, header: str | None) -> bool:
        return hmac.compare_digest((header or "").encode(), f"Bearer {self.token}".encode())

    def publish(self, delta: Delta) -> None:
        for queue in self._subscribers.get(delta.workflow_id, ()):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(delta)

    def following(self, workflow_id: str) -> int:
        """How many streams follow ``workflow_id`` now."""
        return len(self._subscribers.get(workflow_id, ()))

    @contextlib.contextmanager
    def subscribe(self, workflow_id: str) -> Iterator[asyncio.Queue[Delta | FeedItem | None]]:
        queue: asyncio.Queue[Delta | FeedItem | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subscribers.setdefault(workflow_id, set()).add(queue)
        try:
            yield queue
        finally:
            subscribers = self._subscribers[workflow_id]
            subscribers.discard(queue)
            if not subscribers:
                del self._subscribers[workflow_id]


@dataclass
class Previews:
    """One connection's previews: what each stream showed so far, and which ones are over."""

    thread_id: str
    shown: dict[str, str] = field(default_factory=dict)
    over: set[str] = field(default_factory=set)

    def preview(self, delta: Delta) -> dict[str, Any] | None:
        """The ``message_chunk`` to send for ``delta``, or None when it must not be shown."""
        sid = delta.stream_id
        if sid in self.over or not delta.text:
            return None
        so_far = self.shown.get(sid, "")
        if delta.offset != len(so_far):
            self.over.add(sid)  # a gap: showing more would show a text with a hole in it
            return None
        self.shown[sid] = so_far + delta.text
        return {"thread_id": self.thread_id, "id": sid, "role": "assistant", "agent": delta.agent,
                "content": delta.text, "preview": True}

    def final(self, item: FeedItem) -> FeedItem:
        """Note that ``item`` supersedes its preview; the item itself is unchanged."""
        sid = item.data.get("stream_id")
        if isinstance(sid, str):
            self.over.add(sid)
        return item

    def continuation(self, item: FeedItem) -> FeedItem:
        """``item`` as the rest of its preview, for clients that join chunks by id (DeerFlow's UI):
        same id, and the message's content without the part already shown."""
        sid = item.data.get("stream_id")
        shown = self.shown.get(sid, "") if isinstance(sid, str) else ""
        self.final(item)
        if not shown:
            return item
        content = item.data.get("content", "")
        if item.event == "message_chunk":
            if not content.startswith(shown):
                return item
            data = item.data | {"id": sid, "content": content[len(shown):]}
        elif item.event == "tool_calls":
            data = item.data | {"id": sid}
        else:
            return item
        return FeedItem(item.position, item.event, data, item.ends_turn)


async def with_previews(feed: AsyncIterator[FeedItem], hub: TokenHub, workflow_id: str,
                        ) -> AsyncIterator[FeedItem | Delta]:
    """The feed's items, with the previews of ``workflow_id`` that arrive meanwhile in between."""
    with hub.subscribe(workflow_id) as queue:
        failure: list[BaseException] = []

        async def pump() -> None:
            try:
                async for item in feed:
                    await queue.put(item)
            except Exception as error:  # handed to the consumer, which reports it
                failure.append(error)
            await queue.put(None)

        task = asyncio.create_task(pump())
        try:
            while (entry := await queue.get()) is not None:
                yield entry
            if failure:
                raise failure[0]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
