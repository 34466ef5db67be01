"""The API server's doors: where it may listen, who may call it, from which page, with how much.

* A bind beyond loopback needs a token (``DEERFLOW_WEB_TOKEN`` or named ``DEERFLOW_WEB_TOKENS``): the
  server then refuses every API call without ``Authorization: Bearer <token>``, hands the handlers
  the token's holder (server/access.py) and refuses a read-only holder's every change. Without a
  token it listens on loopback only.
* With no token, the Host header must name loopback, so a web page that rebinds its own DNS name
  to 127.0.0.1 cannot use the server (DNS rebinding).
* A request that changes something and comes from a browser page (it has an Origin) must come
  from the server's own page or an origin the operator listed; CORS answers only those origins.
* Request bodies are read up to ``DEERFLOW_WEB_MAX_BODY_BYTES``, and parsed as JSON only up to
  ``MAX_JSON_DEPTH`` levels of nesting; a client that hangs up mid-body is one line in the log.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from workflows.text.untrusted_text import nested_deeper, scrubbed

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Deeper than any body the API takes (DeerFlow's deepest, mcp_settings, has 5 levels), and shallow
# enough that nothing walking a parsed body recursively can reach Python's recursion limit.
MAX_JSON_DEPTH = 32
# uvicorn's own error log, so a dropped client is one line in the format of the server's other lines.
log = logging.getLogger("uvicorn.error")


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP status a plain endpoint answers."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, has_token: bool, setting: str = "DEERFLOW_WEB_TOKEN or DEERFLOW_WEB_TOKENS") -> None:
    """Refuse to listen beyond loopback without a token: the API starts runs and sends reviews, and
    the codec server (``setting`` DEERFLOW_CODEC_TOKEN) decrypts payloads."""
    if not is_loopback(host) and not has_token:
        raise RequestError(f"Listening on {host} needs {setting}: beyond loopback every API call "
                           "must carry that token (Authorization: Bearer …).")


class Holder(Protocol):
    """Whoever holds a token: a name for refusals, and whether it may only read."""

    @property
    def name(self) -> str: ...

    @property
    def read_only(self) -> bool: ...


@dataclass(frozen=True)
class SharedSecret:
    """The holder of a server's one shared token (the codec server's): may do all it serves."""

    name: str
    read_only: bool = False


def single_token(token: str | None, name: str) -> dict[str, Holder]:
    """The token table of a server with one shared token (None: no token, loopback only)."""
    return {token: SharedSecret(name)} if token else {}


def holder_of(tokens: Mapping[str, Holder], authorization: str) -> Holder | None:
    """The holder of the ``Bearer`` token in ``authorization``; every token is compared, in constant
    time, so the answer's timing says nothing about which one came close."""
    found = None
    for token, holder in tokens.items():
        if hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode()):
            found = holder
    return found


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware applying the token, Host and Origin rules to every request under ``prefix``
    (the API server's ``/api/``; all of the codec server's, whose token is DEERFLOW_CODEC_TOKEN).
    ``tokens`` maps each token to its holder (empty: no token needed, loopback only); the holder
    goes to the handlers as ``request.state.principal``."""

    def __init__(self, app: ASGIApp, tokens: Mapping[str, Holder], allowed_origins: list[str],
                 prefix: str = "/api/", token_setting: str = "DEERFLOW_WEB_TOKEN",
                 origins_setting: str = "DEERFLOW_WEB_ALLOWED_ORIGINS") -> None:
        self.app = app
        self.tokens = dict(tokens)
        self.allowed_origins = frozenset(allowed_origins)
        self.prefix = prefix
        self.token_setting = token_setting
        self.origins_setting = origins_setting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix) or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        holder = holder_of(self.tokens, headers.get("authorization", "")) if self.tokens else None
        problem = self._problem(scope["method"], headers, holder)
        if problem is None:
            scope.setdefault("state", {})["principal"] = holder
            await self.app(scope, receive, send)
            return
        status, message = problem
        await JSONResponse({"detail": message}, status_code=status)(scope, receive, send)

    def _problem(self, method: str, headers: dict[str, str], holder: Holder | None) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if self.tokens:
            if holder is None:
                return 401, f"this server needs a token: Authorization: Bearer <{self.token_setting}>"
            if holder.read_only and method != "GET":
                return 403, f"the token {holder.name!r} may only read"
        elif _host_name(host).lower() not in LOOPBACK_NAMES:
            return 403, "this server answers only requests addressed to loopback (Host header)"
        origin = headers.get("origin")
        if method != "GET" and origin is not None and origin.rstrip("/") not in self.allowed_origins \
                and origin not in (f"http://{host}", f"https://{host}"):
            return 403, f"origin {origin!r} is not allowed ({self.origins_setting})"
        return None


async def read_body(request: Request, max_bytes: int, setting: str = "DEERFLOW_WEB_MAX_BODY_BYTES") -> bytes:
    """The body, refused beyond ``max_bytes`` (the operator's ``setting``) before more is read."""
    too_big = RequestError(f"request body over {max_bytes} bytes ({setting})", 413)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
        raise too_big
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise too_big
    except ClientDisconnect:
        # Clients hang up all the time (a closed tab, a timeout); it is not the server's error.
        peer = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.warning("%s closed the connection in the middle of its %s %s body", peer, request.method,
                    request.url.path)
        raise RequestError("the client closed the connection before its body was complete") from None
    return bytes(body)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The body as JSON (:func:`parsed_body`), refused beyond ``max_bytes`` before more than that is
    read; parsed in a thread, so a large body never holds the event loop other requests wait on."""
    return await asyncio.to_thread(parsed_body, await read_body(request, max_bytes))


def parsed_body(body: bytes) -> Any:
    """``body`` as JSON, refused when it is not JSON or is nested deeper than ``MAX_JSON_DEPTH`` (the
    parser itself recurses: 30,000 levels is a RecursionError); a "\\ud800" escape, which no payload
    or response could carry, reads as U+FFFD."""
    too_deep = RequestError(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(body)
    except RecursionError:
        raise too_deep from None
    except ValueError as error:
        raise RequestError(f"request body is not JSON: {error}") from error
    if nested_deeper(value, MAX_JSON_DEPTH):
        raise too_deep
    return scrubbed(value)
