"""The ASGI app: DeerFlow's endpoints, our page's API, the page itself, and the doors around them.

It holds no run state: everything it shows is read from Temporal (history, the status query,
results), so a restarted server loses nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

from config.resources import SUPPORTED_SUFFIXES, ResourcePolicy
from config.settings import Settings
from offline.providers import offline_parts
from runtime.token_stream_format import PATH as TOKEN_STREAM_PATH
from server import content, sse
from server.chat import ChatTurns, problem
from server.enhance import enhance
from server.live import Ingest, TokenHub
from server.runs import Runs
from server.security import Guard, RequestError, read_json
from server.threads import ThreadError, checked_thread_id, latest_run
from server.uploads import Uploads

STATIC = Path(__file__).resolve().parent / "static"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MAX_RESOURCES = 200


def create_app(client: Client, settings: Settings, keep_alive: float = 15.0, hub: TokenHub | None = None,
               ) -> Starlette:
    hub = hub or TokenHub(settings)
    chat = ChatTurns(client, settings, hub)
    runs = Runs(client, settings, hub)
    uploads = Uploads(settings)
    limit = settings.web_max_body_bytes
    streams = sse.StreamLimit(settings.web_max_streams)

    def endpoint(handler: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
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

    async def chat_stream(request: Request) -> Response:
        try:
            body: Any = await read_json(request, limit)
        except RequestError as error:
            body = error  # reported as the stream's error event, as DeerFlow's UI expects
        thread = str(body.get("thread_id", ""))[:64] if isinstance(body, dict) else ""
        return StreamingResponse(streams.bounded(chat.stream(body, keep_alive), thread),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

    async def chat_cancel(request: Request) -> Any:
        body = await read_json(request, limit)
        thread = checked_thread_id(str(body.get("thread_id", ""))) if isinstance(body, dict) else ""
        handle = await latest_run(client, settings.web_thread_prefix, thread)
        await handle.cancel()
        return {"cancelled": handle.id}

    async def config(request: Request) -> Any:
        return {"rag": {"provider": settings.rag_provider or None},
                "models": {"basic": [settings.basic_model],
                           "reasoning": [settings.reasoning_model] if settings.reasoning_model else []},
                "offline_demo": any(offline_parts(settings))}

    async def rag_resources(request: Request) -> Any:
        query = request.query_params.get("query", "").lower()
        return {"resources": _resources(ResourcePolicy.from_settings(settings), query)}

    async def rag_upload(request: Request) -> Any:
        return await uploads.store(request)

    async def run_events(request: Request) -> Response:
        run = request.path_params["run"]
        await runs.handle(run)  # a refusal is a plain error before the stream starts
        after = request.query_params.get("after") or request.headers.get("last-event-id")
        return StreamingResponse(streams.bounded(sse.with_keep_alive(runs.events(run, after), keep_alive), run),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

    async def start_run(request: Request) -> Any:
        return {"id": await runs.start(await read_json(request, limit))}

    async def review(request: Request) -> Any:
        outcome = await runs.review(request.path_params["run"], await read_json(request, limit))
        return outcome.model_dump()

    async def answer(request: Request) -> Any:
        outcome = await runs.answer(request.path_params["run"], await read_json(request, limit))
        return outcome.model_dump()

    async def cancel(request: Request) -> Any:
        await runs.cancel(request.path_params["run"])
        return {"cancelled": request.path_params["run"]}

    async def list_runs(request: Request) -> Any:
        return {"runs": await runs.overview()}

    async def show(request: Request) -> Any:
        return await runs.show(request.path_params["run"])

    async def prompt_enhance(request: Request) -> Any:
        return await enhance(client, await read_json(request, limit))

    async def token_stream(request: Request) -> Response:
        """Workers' token previews (activities/model/token_stream.py): shared token, size-capped, no reply body."""
        if not hub.authorised(request.headers.get("authorization")):
            return JSONResponse({"detail": "token previews need the shared token"}, status_code=401)
        try:
            ingest = Ingest.model_validate(await read_json(request, limit))
        except RequestError as error:
            return JSONResponse({"detail": str(error)}, status_code=error.status)
        except ValidationError as error:
            return JSONResponse({"detail": problem(error)}, status_code=400)
        for delta in ingest.deltas:
            hub.publish(delta)
        return Response(status_code=204)

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Content-Security-Policy": PAGE_POLICY})

    routes = [
        Route("/api/chat/stream", chat_stream, methods=["POST"]),
        Route("/api/chat/cancel", endpoint(chat_cancel), methods=["POST"]),
        Route("/api/config", endpoint(config), methods=["GET"]),
        Route("/api/rag/resources", endpoint(rag_resources), methods=["GET"]),
        Route("/api/rag/upload", endpoint(rag_upload), methods=["POST"]),
        Route("/api/prompt/enhance", endpoint(prompt_enhance), methods=["POST"]),
        *content.routes(client, settings, hub, endpoint, lambda stream: StreamingResponse(
            streams.bounded(stream, "content"), media_type="text/event-stream", headers=SSE_HEADERS)),
        Route("/api/runs", endpoint(list_runs), methods=["GET"]),
        Route("/api/runs", endpoint(start_run), methods=["POST"]),
        Route("/api/runs/{run:str}", endpoint(show), methods=["GET"]),
        Route("/api/runs/{run:str}/events", endpoint(run_events), methods=["GET"]),
        Route("/api/runs/{run:str}/review", endpoint(review), methods=["POST"]),
        Route("/api/runs/{run:str}/answer", endpoint(answer), methods=["POST"]),
        Route("/api/runs/{run:str}/cancel", endpoint(cancel), methods=["POST"]),
        Route("/", page, methods=["GET"]),
        Route(TOKEN_STREAM_PATH, token_stream, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [
        Middleware(CORSMiddleware, allow_origins=settings.web_allowed_origins, allow_methods=["GET", "POST", "OPTIONS"],
                   allow_headers=["Content-Type", "Cache-Control", "Authorization", "Last-Event-ID"]),
        Middleware(Guard, token=settings.web_token, allowed_origins=settings.web_allowed_origins),
    ]
    return Starlette(routes=routes, middleware=middleware)


# The page runs only its own scripts: model-written text that slipped past the sanitiser still
# could not load or run code, or send data anywhere but this server.
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _resources(policy: ResourcePolicy, query: str) -> list[dict[str, str]]:
    """Documents under the operator's resource roots, as DeerFlow's Resource JSON (uri = path)."""
    found: list[dict[str, str]] = []
    for root in policy.roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if len(found) >= MAX_RESOURCES:
                return found
            if path.is_file() and path.suffix.lower() in SUPPORTED_SUFFIXES and policy.allows(path.resolve()) \
                    and query in path.name.lower():
                found.append({"uri": str(path.resolve()), "title": path.name,
                              "description": str(path.relative_to(root))})
    return found
