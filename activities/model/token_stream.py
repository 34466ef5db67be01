"""Token previews: the ``chat`` activity's reply, published while the model generates it.

Why a side channel and not history: history stays the one record of a run (the feed is derived
from it, server/feed.py). Tokens are a preview of a message history will hold in full a moment
later, so they go, best effort, to a sink over HTTP: the API server's ``/internal/token-stream``
(server/live.py), which hands them to the run's open pages. Nothing of them enters history.

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
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from pydantic import BaseModel, Field
from temporalio import activity

from activities.guards.secret_scrubber import SecretScrubber
from config.settings import Settings

ANNOUNCEMENT = "token-stream.json"
PATH = "/internal/token-stream"
# Publishes wait this long for more text before sending, so one request carries several tokens.
COALESCE_SECONDS = 0.02
_log = logging.getLogger(__name__)
# Senders finishing after their activity returned; held so the loop does not collect them early.
_finishing: set[asyncio.Task[None]] = set()


class Sink(BaseModel):
    """Where previews go: an HTTP endpoint and the bearer token it expects."""

    url: str = Field(pattern=r"^https?://")
    token: str = Field(min_length=16)


class Delta(BaseModel):
    """One published piece of a reply: ``text`` starts at character ``offset`` of the stream."""

    workflow_id: str = Field(min_length=1, max_length=255)
    run_id: str = Field(min_length=1, max_length=64)
    activity_id: str = Field(min_length=1, max_length=64)
    attempt: int = Field(ge=1)
    agent: str = Field(max_length=64)
    offset: int = Field(ge=0)
    text: str

    @property
    def stream_id(self) -> str:
        return stream_id(self.workflow_id, self.run_id, self.activity_id, self.attempt)


def stream_id(workflow_id: str, run_id: str, activity_id: str, attempt: int) -> str:
    """The preview's message id; the feed puts the same id on the final message (``stream_id``)."""
    return f"{workflow_id}/live.{run_id}.{activity_id}.{attempt}"


def announce(home: Path, url: str, token: str) -> Path:
    """Tell local workers where this API server takes previews (owner-only file, atomic write)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / ANNOUNCEMENT
    temporary = home / f".{ANNOUNCEMENT}.{secrets.token_hex(4)}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump({"url": url, "token": token}, file)
    os.replace(temporary, path)
    return path


def configured_sink(settings: Settings) -> Sink | None:
    """The operator's sink, else the one a local ``serve`` announced, else none."""
    if not settings.token_stream:
        return None
    if settings.token_stream_url:
        return Sink(url=settings.token_stream_url, token=settings.token_stream_token or "") \
            if settings.token_stream_token and len(settings.token_stream_token) >= 16 else None
    try:
        return Sink.model_validate_json((settings.home / ANNOUNCEMENT).read_bytes())
    except (OSError, ValueError):
        return None


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
            self.stopped = True  # a secret: nothing from here on leaves the worker
            return
        self.checked = end
        if self.checked - self.sent > self.max_pending:
            self.stopped = True  # the sink cannot keep up; the final message will show the rest
            return
        self.more.set()

    async def _send_all(self) -> None:
        headers = {"Authorization": f"Bearer {self.sink.token}"}
        try:
            async with httpx.AsyncClient(timeout=self.timeout, trust_env=False) as http:
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


async def invoke(runnable: Any, messages: list[BaseMessage], agent: str, settings: Settings) -> AIMessage:
    """The ``chat`` activity's hook: ``runnable.ainvoke(messages)``, or, when there is a sink, the
    same reply assembled from the model's stream while its text is previewed."""
    sink = configured_sink(settings)
    if sink is None:
        return await runnable.ainvoke(messages)
    info = activity.info()
    head = {"workflow_id": info.workflow_id or "", "run_id": info.workflow_run_id or "",
            "activity_id": info.activity_id, "attempt": info.attempt, "agent": agent}
    # Built per call: its head names this call's run and attempt.
    publisher = Publisher(sink, head, SecretScrubber.for_settings(settings), settings)
    complete = False
    try:
        reply = await _assemble(runnable.astream(messages), publisher)
        complete = True
    finally:
        publisher.finish(complete)
    return reply


async def _assemble(chunks: AsyncIterator[AIMessageChunk], publisher: Publisher) -> AIMessage:
    """The chunks summed into one message (as langchain does for ``ainvoke``), text previewed as it comes."""
    reply: AIMessageChunk | None = None
    async for chunk in chunks:
        reply = chunk if reply is None else reply + chunk
        if isinstance(chunk.content, str):
            publisher.add(chunk.content)
    return reply if reply is not None else AIMessage(content="")

