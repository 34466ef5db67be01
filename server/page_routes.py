"""Our research page and its files, and the workers' door for token previews."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from runtime.token_stream_format import PATH as TOKEN_STREAM_PATH
from server.chat import problem
from server.live import Ingest
from server.security import RequestError, read_json
from server.services import services

STATIC = Path(__file__).resolve().parent / "static"
# The page runs only its own scripts: model-written text that slipped past the sanitiser still
# could not load or run code, or send data anywhere but this server.
# The podcast plays from a blob: URL the page made of the server's MP3 (media-src).
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "media-src blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Content-Security-Policy": PAGE_POLICY})


async def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page links: the page's own icon, not a 404."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml",
                        headers={"Cache-Control": "max-age=86400"})


async def token_stream(request: Request) -> Response:
    """Workers' token previews (activities/model/token_stream.py): shared token, size-capped, no reply body."""
    shared = services(request)
    if not shared.hub.authorised(request.headers.get("authorization")):
        return JSONResponse({"detail": "token previews need the shared token"}, status_code=401)
    try:
        ingest = Ingest.model_validate(await read_json(request, shared.body_limit))
    except RequestError as error:
        return JSONResponse({"detail": str(error)}, status_code=error.status)
    except ValidationError as error:
        return JSONResponse({"detail": problem(error)}, status_code=400)
    for delta in ingest.deltas:
        shared.hub.publish(delta)
    return Response(status_code=204)


ROUTES = [
    Route("/", page, methods=["GET"]),
    Route("/runs/{run:str}", page, methods=["GET"]),  # a run's own address: the page opens it (app.js)
    Route("/favicon.ico", favicon, methods=["GET"]),
    Route(TOKEN_STREAM_PATH, token_stream, methods=["POST"]),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]
