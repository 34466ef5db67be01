"""Token previews: the ``chat`` activity's reply, published while the model generates it.

Why a side channel and not history: history stays the one record of a run (the feed is derived
from it, server/feed.py). Tokens are a preview of a message history will hold in full a moment
later, so they go, best effort, to a sink over HTTP: the API server's ``/internal/token-stream``
(server/live.py), which hands them to the run's open pages. Nothing of them enters history. The
wire format the two share (``Delta``, the stream id, the sink's announcement) is
runtime/token_stream_format.py.

The sink is the operator's (``DEERFLOW_TOKEN_STREAM_URL`` and ``DEERFLOW_TOKEN_STREAM_TOKEN``), so
workers and the API server may run on different machines; unset, it is the one a local
``starter.py serve`` announces in ``<home>/token-stream.json`` (the embedded default, no setting).

What keeps it from costing the model call anything:
* the model call never waits for the sink: tokens go into a buffer that one background task
  sends, each send bounded by ``DEERFLOW_TOKEN_STREAM_TIMEOUT``;
* a send that fails, or a buffer past ``DEERFLOW_TOKEN_STREAM_MAX_PENDING`` characters, ends the
  preview of that reply: what was published is always a prefix of the reply, never a reply with
  holes, so a page can take the final message as its continuation;
* a sink that is absent is found absent once per call (a missing file), not per token.

Each attempt is its own stream (``<workflow>/live.<run>.<activity>.<attempt>``): a retried attempt's
tokens never add to the failed attempt's text. Secrets: the text passes the worker's scrubber
with an overlap of the longest secret before it leaves, and a reply in which a secret appears is
not previewed from there on; the sink's token travels only in the request's header.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata, add_usage
from temporalio import activity

from activities.guards.secret_scrubber import SecretScrubber
from activities.model import reply_calls
from activities.support.tls import verifying_context
from config.settings import Settings
from runtime.token_stream_format import Sink, configured_sink

# Publishes wait this long for more text before sending, so one request carries several tokens.
COALESCE_SECONDS = 0.02
_log = logging.getLogger(__name__)
# Senders finishing after their activity returned; held so the loop does not collect them early.
_finishing: set[asyncio.Task[None]] = set()


class Publisher:
    """One attempt's preview: buffered, sent by one background task, given up on the first failure."""

    def __init__(self, sink: Sink, head: dict[str, Any], scrubber: SecretScrubber, settings: Settings) -> None:
        self.sink = sink
        self.head = head
        self.scrubber = scrubber
        self.timeout = settings.token_stream_timeout
        self.max_pending = settings.token_stream_max_pending
        self.text = ""  # the reply so far
        self.checked = 0  # text[:checked] is free of secrets and queued or sent
        self.sent = 0  # text[:sent] has been handed to the sink
        self.stopped = False
        self.more = asyncio.Event()
        self.done = False
        self.task = asyncio.create_task(self._send_all())

    def add(self, piece: str) -> None:
        """Called for every token; never blocks."""
        if self.stopped or not piece:
            return
        self.text += piece
        self._release(len(self.text) - max(self.scrubber.longest - 1, 0))

    def finish(self, complete: bool) -> None:
        """The reply is over: send the rest (if it completed) and let the sender end on its own."""
        if complete:
            self._release(len(self.text))
        self.done = True
        self.more.set()
        _finishing.add(self.task)
        self.task.add_done_callback(_finishing.discard)

    def _release(self, end: int) -> None:
        if self.stopped or end <= self.checked:
            return
        window = self.text[max(self.checked - self.scrubber.longest, 0):end]
        if self.scrubber.scrub(window) != window:
            # A secret, or a lone surrogate (which the sink's JSON cannot carry; the scrubber replaces
            # it): nothing from here on leaves the worker.
            self.stopped = True
            return
        self.checked = end
        if self.checked - self.sent > self.max_pending:
            self.stopped = True  # the sink cannot keep up; the final message will show the rest
            return
        self.more.set()

    async def _send_all(self) -> None:
        headers = {"Authorization": f"Bearer {self.sink.token}"}
        try:
            # The process's verifying context (an https sink): a new one per call would load the CA
            # bundle on the event loop, about 28 ms of CPU every model call. No proxy: trust_env off.
            async with httpx.AsyncClient(timeout=self.timeout, trust_env=False, verify=verifying_context()) as http:
                while not self.stopped:
                    await self.more.wait()
                    self.more.clear()
                    if not self.done:
                        await asyncio.sleep(COALESCE_SECONDS)
                    end = self.checked
                    if end > self.sent and not self.stopped:
                        body = {**self.head, "offset": self.sent, "text": self.text[self.sent:end]}
                        response = await http.post(self.sink.url, json={"deltas": [body]}, headers=headers)
                        response.raise_for_status()
                        self.sent = end
                    if self.done and self.sent >= self.checked:
                        return
        except Exception as error:  # a preview is never worth failing or slowing the model call
            _log.debug("token preview stopped: %s", type(error).__name__)
        finally:
            self.stopped = True


async def invoke(runnable: Any, messages: list[BaseMessage], agent: str, settings: Settings,
                 scrubber: SecretScrubber) -> AIMessage:
    """The ``chat`` activity's hook: ``runnable.ainvoke(messages)``, or, when there is a sink, the
    same reply assembled from the model's stream while its text is previewed, through ``scrubber``
    (the worker's, built once with its settings: their secrets do not change from call to call)."""
    sink = configured_sink(settings)
    if sink is None:
        return await runnable.ainvoke(messages)
    info = activity.info()
    head = {"workflow_id": info.workflow_id or "", "run_id": info.workflow_run_id or "",
            "activity_id": info.activity_id, "attempt": info.attempt, "agent": agent}
    # Built per call: its head names this call's run and attempt.
    publisher = Publisher(sink, head, scrubber, settings)
    complete = False
    try:
        reply = await _assemble(runnable.astream(messages), publisher)
        complete = True
    finally:
        publisher.finish(complete)
    return reply


async def _assemble(chunks: AsyncIterator[AIMessageChunk], publisher: Publisher) -> AIMessage:
    """The chunks as one message, text previewed as it comes, in one pass: the text, the metadata and
    usage as langchain would sum them, and the tool calls' pieces joined by index, unread, for the
    parser a whole reply's calls go through too (``reply_calls.py``: why not langchain's sum)."""
    text: list[str] = []
    calls: dict[int | str, reply_calls.StreamedCall] = {}
    metadata: dict[str, Any] = {}
    usage: UsageMetadata | None = None
    async for chunk in chunks:
        if isinstance(chunk.content, str) and chunk.content:
            text.append(chunk.content)
            publisher.add(chunk.content)
        for piece in chunk.tool_call_chunks:
            index = piece.get("index")  # a piece without one is a call of its own, as langchain has it
            key = f"unindexed {len(calls)}" if index is None else index
            calls.setdefault(key, reply_calls.StreamedCall()).add(piece)
        # Taken out of the chunk, which langchain keeps: its ``astream`` sums every chunk when the stream
        # ends, for its callbacks, and summing 2,500 calls' pieces held the worker's loop for 11 s at once,
        # past the attempt's heartbeat timeout (the retried attempt's ordinary reply ran instead).
        chunk.tool_call_chunks, chunk.tool_calls, chunk.invalid_tool_calls = [], [], []
        metadata.update({name: value for name, value in chunk.response_metadata.items() if value is not None})
        if chunk.usage_metadata:
            usage = add_usage(usage, chunk.usage_metadata)
    reply = AIMessage(content="".join(text), response_metadata=metadata, usage_metadata=usage)
    return reply_calls.with_calls(reply, [call.joined() for call in calls.values()])
