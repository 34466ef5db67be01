"""The codec server: Temporal's remote codec protocol, so people can read payloads.

The Web UI (``--ui-codec-endpoint``, or its *Data Encoder* setting) and the ``temporal`` CLI
(``--codec-endpoint``) send the payloads they show to ``POST /decode`` and get back what the
worker's data converter would read: an external-storage reference is replaced by the payload in
the blob store, and an encrypted payload is decrypted. Without it they show a reference (a report,
a conversation or a page over the threshold) or ciphertext. ``POST /encode`` encrypts what the UI
sends (a signal's input) as a client would; it never writes to the blob store.

Both take and return ``{"payloads": [<Payload in protobuf JSON>]}``. The doors are the API
server's (server/security.py): beyond loopback a bearer token (``DEERFLOW_CODEC_TOKEN``), Host
checked against DNS rebinding without one, browser origins limited to the listed UI origins (CORS,
preflight included), and a body size cap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from runtime.payload_steps import decode_payloads, encrypt_payloads
from server.security import Guard, RequestError, read_json, single_token
from storage.filesystem import PayloadStoreError

# What the Web UI sends with each request (Authorization when it passes its access token).
CODEC_HEADERS = ["content-type", "x-namespace", "authorization"]


def parse_payloads(body: Any) -> list[Payload]:
    """``{"payloads": [...]}`` in protobuf JSON → payloads; anything else is a 400 naming the problem."""
    if not isinstance(body, dict) or not isinstance(body.get("payloads"), list):
        raise RequestError('the body must be {"payloads": [...]}')
    payloads = []
    for index, item in enumerate(body["payloads"]):
        if not isinstance(item, dict):
            raise RequestError(f"payloads[{index}] is not an object")
        try:
            payloads.append(ParseDict(item, Payload()))
        except ParseError as error:
            raise RequestError(f"payloads[{index}] is not a Payload: {error}") from None
    return payloads


def payloads_json(payloads: Sequence[Payload]) -> dict[str, Any]:
    return {"payloads": [MessageToDict(payload) for payload in payloads]}


def create_codec_app(converter: DataConverter, settings: Settings) -> Starlette:
    origins = settings.codec_origins()
    limit = settings.codec_max_body_bytes

    def endpoint(
        transform: Callable[[DataConverter, Sequence[Payload]], Awaitable[list[Payload]]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                payloads = parse_payloads(await read_json(request, limit))
                return JSONResponse(payloads_json(await transform(converter, payloads)))
            except RequestError as error:
                return JSONResponse({"detail": str(error)}, status_code=error.status)
            except PayloadStoreError as error:  # the store is not there: the operator can restore it
                return JSONResponse({"detail": str(error)}, status_code=503)
            except (ApplicationError, ValueError, RuntimeError) as error:
                # A forged or foreign reference, an unknown key id, tampered ciphertext.
                return JSONResponse({"detail": f"cannot decode: {error}"}, status_code=400)
        return handle

    return Starlette(
        routes=[Route("/decode", endpoint(decode_payloads), methods=["POST"]),
                Route("/encode", endpoint(encrypt_payloads), methods=["POST"])],
        middleware=[
            # Outermost, so refusals carry CORS headers too and the UI can show why.
            Middleware(CORSMiddleware, allow_origins=origins, allow_methods=["POST"], allow_headers=CODEC_HEADERS,
                       max_age=600),
            Middleware(Guard, tokens=single_token(settings.codec_token, "codec"), allowed_origins=origins, prefix="/",
                       token_setting="DEERFLOW_CODEC_TOKEN", origins_setting="DEERFLOW_CODEC_ALLOWED_ORIGINS"),
        ],
    )
