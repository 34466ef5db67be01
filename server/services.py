"""What the HTTP handlers share, built once per app and kept on ``app.state``.

Why not closures: the route modules (server/deerflow_routes.py, run_routes.py, page_routes.py,
content.py) hold small module-level handlers, each of which reads what it needs from the request's
app; the app itself (server/app.py) only assembles them. The app holds no run state: everything it
shows is read from Temporal, so a restarted server loses nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

from config.settings import Settings
from server import sse
from server.chat import ChatTurns, problem
from server.live import TokenHub
from server.run_lists import RunLists
from server.runs import Runs
from server.security import RequestError
from server.threads import ThreadError
from server.uploads import Uploads

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
Handler = Callable[[Request], Awaitable[Any]]


@dataclass(frozen=True)
class Services:
    client: Client
    settings: Settings
    hub: TokenHub
    chat: ChatTurns
    runs: Runs
    lists: RunLists
    uploads: Uploads
    streams: sse.StreamLimit
    keep_alive: float

    @classmethod
    def build(cls, client: Client, settings: Settings, hub: TokenHub, keep_alive: float) -> Services:
        uploads = Uploads(settings)
        return cls(client=client, settings=settings, hub=hub, chat=ChatTurns(client, settings, hub, uploads),
                   runs=Runs(client, settings, hub, uploads), lists=RunLists(client), uploads=uploads,
                   streams=sse.StreamLimit(settings.web_max_streams), keep_alive=keep_alive)

    @property
    def body_limit(self) -> int:
        return self.settings.web_max_body_bytes

    def event_stream(self, stream: AsyncIterator[str], key: str,
                     on_disconnect: Callable[[], None] | None = None) -> StreamingResponse:
        """An SSE response, counted against the operator's open-stream limit under ``key``;
        ``on_disconnect`` is told when its client goes away."""
        return EventStreamResponse(self.streams.bounded(stream, key), on_disconnect,
                                   media_type="text/event-stream", headers=SSE_HEADERS)


class EventStreamResponse(StreamingResponse):
    """A stream that may be broken off: on ``BrokenStream`` it stops without its last (empty, final)
    message, and the server closes the connection with the body unfinished.

    It tells ``on_disconnect`` when its client goes away: ASGI's ``http.disconnect`` (or, from an
    ASGI 2.4 server, a write to the closed connection), not a server shutting down, which cancels the
    response instead. A client may also leave after the stream ended; ``on_disconnect`` tells the two
    apart.
    """

    def __init__(self, content: AsyncIterator[str], on_disconnect: Callable[[], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.on_disconnect = on_disconnect or (lambda: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.on_disconnect()
            return message

        try:
            await super().__call__(scope, watched, send)
        except ClientDisconnect:
            self.on_disconnect()
            raise

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                data = chunk.encode(self.charset) if isinstance(chunk, str) else chunk
                await send({"type": "http.response.body", "body": data, "more_body": True})
        except sse.BrokenStream:
            return  # the body stays unfinished: the server closes the connection
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """JSON in and out; a refused request gets its reason and status, never a traceback."""
    async def wrapped(request: Request) -> Response:
        try:
            result = await handler(request)
        except RequestError as error:
            return JSONResponse({"detail": str(error)}, status_code=error.status)
        except ThreadError as error:
            return JSONResponse({"detail": str(error)}, status_code=400)
        except (ValidationError, WorkflowUpdateFailedError) as error:
            return JSONResponse({"detail": problem(error)}, status_code=400)
        except RPCError as error:
            return JSONResponse({"detail": problem(error)}, status_code=502)
        except WorkflowUpdateRPCTimeoutOrCancelledError as error:
            return JSONResponse({"detail": problem(error)}, status_code=504)
        return result if isinstance(result, Response) else JSONResponse(result)
    return wrapped
