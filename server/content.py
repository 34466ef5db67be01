"""The content flows' endpoints: DeerFlow's report evaluation, prose editing, slides, podcast and
speech, each one a small workflow the server starts and waits for.

The server validates a body with the workflow's own request model before it starts anything (a
400 naming the field), reads at most the operator's content cap (``DEERFLOW_WEB_MAX_CONTENT_BYTES``;
more is a 400 too), and gives each run an execution timeout, so a run nobody waits for any more
ends on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.client import Client, WorkflowHandle

from config.settings import Settings
from runtime import artefacts
from runtime.token_stream_format import Delta
from server.access import principal
from server.feed import FeedItem
from server.flows import flow_id, flow_result, read_content, start_flow
from server.live import TokenHub
from server.mcp_check import metadata
from server.security import RequestError, log, read_json
from server.services import endpoint, services
from server.sse import BrokenStream
from workflows.content.speech import SPEECH_WORKFLOW
from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.decisions import Actor
from workflows.contracts.evaluation import EVALUATOR_WORKFLOW, EvaluateRequest, EvaluationResult
from workflows.contracts.podcast import NO_VOICE_MESSAGE, PODCAST_WORKFLOW, PodcastRequest, PodcastResult, TTSRequest
from workflows.contracts.prose import PROSE_WORKFLOW, ProseRequest, ProseResult
from workflows.contracts.slides import PPTX_MEDIA_TYPE, SLIDES_WORKFLOW, SlidesRequest, SlidesResult


async def evaluate(client: Client, settings: Settings, body: Any, who: Actor) -> dict[str, Any]:
    """``POST /api/report/evaluate``: DeerFlow's metrics, score and grade (+ the judge with ``use_llm``)."""
    request = EvaluateRequest.model_validate(body)
    handle = await start_flow(client, settings, EVALUATOR_WORKFLOW, request, EvaluationResult, "report evaluation", who)
    return (await flow_result(handle, settings, "report evaluation")).answer()


async def slides(client: Client, settings: Settings, body: Any, who: Actor) -> Response:
    """``POST /api/ppt/generate``: the ``.pptx`` file itself, as DeerFlow answers."""
    request = SlidesRequest.model_validate(body)
    handle = await start_flow(client, settings, SLIDES_WORKFLOW, request, SlidesResult, "slide composer", who)
    result = await flow_result(handle, settings, "slide composer")
    return Response(await artefacts.get(settings, result.pptx), media_type=PPTX_MEDIA_TYPE,
                    headers={"Content-Disposition": 'attachment; filename="presentation.pptx"'})


async def podcast(client: Client, settings: Settings, body: Any, who: Actor) -> Response:
    """``POST /api/podcast/generate``: the MP3 DeerFlow's UI plays. Without a voice: a 503 whose
    ``detail`` says so (the UI shows it), with the script in ``script`` (``starter.py podcast`` too)."""
    request = PodcastRequest.model_validate(body)
    handle = await start_flow(client, settings, PODCAST_WORKFLOW, request, PodcastResult, "podcast", who)
    result = await flow_result(handle, settings, "podcast")
    if result.audio is None:
        return JSONResponse({"detail": result.note, "script": result.script.model_dump()}, status_code=503)
    return Response(await artefacts.get(settings, result.audio), media_type="audio/mp3")


async def speech(client: Client, settings: Settings, body: Any, who: Actor) -> Response:
    """``POST /api/tts``: one text read aloud (as DeerFlow, its first characters), as ``audio/mp3``."""
    request = TTSRequest.model_validate(body)
    handle = await start_flow(client, settings, SPEECH_WORKFLOW, request.speech(), ArtefactRef, "speech", who)
    try:
        audio = await flow_result(handle, settings, "speech")
    except RequestError as error:
        raise RequestError(str(error), 503 if NO_VOICE_MESSAGE in str(error) else error.status) from error
    return Response(await artefacts.get(settings, audio), media_type="audio/mp3",
                    headers={"Content-Disposition": "attachment; filename=tts_output.mp3"})


def prose_data(text: str) -> str:
    r"""One ``data:`` event as DeerFlow's editor reads it. Its parser splits events on a blank line
    and lines on "\n" and keeps one data line, so a line break cannot travel as "\n": it goes as
    "\r", which that parser leaves in the text and Markdown reads as a line ending."""
    line = text.replace("\r\n", "\r").replace("\n", "\r")
    return f"data: {line}\n\n"


# DeerFlow's editor highlights the selection it sends to Ask AI and serialises that highlight with
# it (``<mark data-color="#c1ecf970" style=...>``): the UI's marking, not the person's text, so the
# model never sees it (a model that kept it would put raw tags into the answer the editor shows).
HIGHLIGHT_TAG = re.compile(r"</?mark\b", re.IGNORECASE)
# DeerFlow's editor adds each event's text on a 16 ms timer and again once the stream ends, without
# clearing what the timer still holds: a stream that ends within 16 ms of its last event shows that
# text twice. Held open this long after the last event, the timer has run first.
END_HOLD_SECONDS = 0.25


async def prose(client: Client, settings: Settings, hub: TokenHub, body: Any, who: Actor) -> AsyncIterator[str]:
    """``POST /api/prose/generate``: validated and started here (a bad body is a 400, nothing
    started); the returned stream carries the model's token previews, then the rest of the text.

    The status is decided by the first text: a run that fails before it is answered as DeerFlow
    answers a failure, a non-200 with its ``detail`` (its editor shows a toast; an ``error`` event
    it would paste into the text as if it were the answer). One that fails after text was sent
    breaks the stream off unfinished, which the editor's reader also takes as a failure."""
    request = await asyncio.to_thread(prose_request, body)  # CPU work on the request's text: off the loop
    workflow_id = flow_id("prose writer")
    subscription = contextlib.ExitStack()
    queue = subscription.enter_context(hub.subscribe(workflow_id))  # before the start: no early token missed
    try:
        handle = await start_flow(client, settings, PROSE_WORKFLOW, request, ProseResult, "prose writer", who,
                                  workflow_id)
        answer = _ProseAnswer(handle, settings, queue)
        try:
            first = await answer.next_piece()
        except BaseException:
            answer.stop()
            raise
    except BaseException:
        subscription.close()
        raise
    return answer.stream(first, subscription)


def without_highlight(text: str) -> str:
    """``text`` without the editor's ``<mark …>`` and ``</mark>`` tags: what
    ``re.sub(r"</?mark\\b[^>]*>", "", text, flags=re.IGNORECASE)`` gives, in one pass (that pattern
    scans from every "<mark" to the next ">": ``"<mark " * 60000`` held the server for 10-30 s)."""
    pieces, position = [], 0
    while (tag := HIGHLIGHT_TAG.search(text, position)) is not None:
        end = text.find(">", tag.end())
        if end < 0:  # no tag closes after this one, so none after it either
            break
        pieces.append(text[position:tag.start()])
        position = end + 1
    pieces.append(text[position:])
    return "".join(pieces)


def prose_request(body: Any) -> ProseRequest:
    """The request without the editor's highlight (still a valid request: a prompt that was only tags is not)."""
    request = ProseRequest.model_validate(body)
    return ProseRequest.model_validate({**request.model_dump(), "prompt": without_highlight(request.prompt)})


class _Preview:
    """What the editor was shown of the first attempt's stream: a gapless prefix of its text."""

    def __init__(self) -> None:
        self.shown, self.stream, self.live = "", "", True

    def take(self, delta: Delta | FeedItem | None) -> str:
        """The part of ``delta`` to send ("" for none); a retry or a gap ends the preview."""
        if not isinstance(delta, Delta) or not self.live or not delta.text:
            return ""
        self.stream = self.stream or delta.stream_id
        if delta.stream_id != self.stream or delta.offset != len(self.shown):
            self.live = False
            return ""
        self.shown += delta.text
        return delta.text

    def rest(self, text: str) -> str:
        """The final text after what was shown (all of it, after a break, if that was not its start)."""
        return text[len(self.shown):] if text.startswith(self.shown) else f"\n\n{text}"


class _ProseAnswer:
    """The prose run's text, piece by piece: previews of the first attempt while they are a gapless
    prefix, then the rest of the final text."""

    def __init__(self, handle: WorkflowHandle[Any, ProseResult], settings: Settings,
                 queue: asyncio.Queue[Delta | FeedItem | None]) -> None:
        self.result = asyncio.create_task(flow_result(handle, settings, "prose writer"))
        self.queue = queue
        self.preview = _Preview()
        self.finished = False

    async def next_piece(self) -> str | None:
        """The next text to send; None once all of it was. A failed run raises its ``RequestError``."""
        while not self.result.done():
            getter = asyncio.create_task(self.queue.get())
            await asyncio.wait({getter, self.result}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                break
            if piece := self.preview.take(getter.result()):
                return piece
        while not self.queue.empty():  # previews that arrived with the result
            if piece := self.preview.take(self.queue.get_nowait()):
                return piece
        if self.finished:
            return None
        self.finished = True
        return self.preview.rest((await self.result).text) or None

    def stop(self) -> None:
        self.result.cancel()

    async def stream(self, first: str | None, subscription: contextlib.ExitStack) -> AsyncIterator[str]:
        with subscription:
            try:
                piece = first
                while piece is not None:
                    yield prose_data(piece)
                    piece = await self.next_piece()
            except RequestError as error:
                log.warning("The prose writer failed after its answer began; breaking the stream off: %s", error)
                raise BrokenStream(str(error)) from error
            finally:
                self.stop()
            await asyncio.sleep(END_HOLD_SECONDS)


def _cap(request: Request) -> int:
    return services(request).settings.web_max_content_bytes


async def report_evaluate(request: Request) -> Any:
    shared = services(request)
    return await evaluate(shared.client, shared.settings, await read_content(request, _cap(request)),
                          principal(request).actor)


async def prose_generate(request: Request) -> Any:
    shared = services(request)
    stream = await prose(shared.client, shared.settings, shared.hub, await read_content(request, _cap(request)),
                         principal(request).actor)
    return shared.event_stream(stream, "content")


async def ppt_generate(request: Request) -> Any:
    shared = services(request)
    return await slides(shared.client, shared.settings, await read_content(request, _cap(request)),
                        principal(request).actor)


async def podcast_generate(request: Request) -> Any:
    shared = services(request)
    return await podcast(shared.client, shared.settings, await read_content(request, _cap(request)),
                         principal(request).actor)


async def tts(request: Request) -> Any:
    shared = services(request)
    return await speech(shared.client, shared.settings, await read_content(request, _cap(request)),
                        principal(request).actor)


async def mcp_metadata(request: Request) -> Any:
    shared = services(request)
    return await metadata(shared.client, shared.settings, await read_json(request, shared.body_limit),
                          principal(request).actor)


ROUTES = [
    Route("/api/report/evaluate", endpoint(report_evaluate), methods=["POST"]),
    Route("/api/prose/generate", endpoint(prose_generate), methods=["POST"]),
    Route("/api/ppt/generate", endpoint(ppt_generate), methods=["POST"]),
    Route("/api/podcast/generate", endpoint(podcast_generate), methods=["POST"]),
    Route("/api/tts", endpoint(tts), methods=["POST"]),
    Route("/api/mcp/server/metadata", endpoint(mcp_metadata), methods=["POST"]),
]
