"""A tiny scriptable HTTP server on loopback, and a guard that fails a test on any other traffic.

Why: each search provider's tests drive its real client (httpx, ddgs/primp, arxiv.py/requests)
over real HTTP, so the fakes must speak HTTP; and since some of those clients default to public
endpoints, a test must notice, not silently send, a request that escapes to the internet.

Standard library only; the server runs in a daemon thread and binds a free port on loopback
(127.0.0.1, or another 127.0.0.0/8 address for a host other than the page's own).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from offline.loopback_http import FakeServerHandler, send_body, serve_in_thread, shut_down, wire_json


@dataclass
class Reply:
    """What the fake answers: a status, headers and a body (dict/list bodies are sent as JSON)."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (for client timeouts)

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        if isinstance(self.body, dict | list):
            headers.setdefault("Content-Type", "application/json; charset=utf-8")
            return wire_json(self.body).encode("utf-8"), headers  # a lone surrogate as its escape
        if isinstance(self.body, str):
            headers.setdefault("Content-Type", "text/html; charset=utf-8")
            return self.body.encode("utf-8"), headers
        return self.body, headers


@dataclass
class Seen:
    """One request as the fake received it (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    client_port: int = 0  # the client's end of the connection: requests on one connection share it

    def param(self, name: str) -> str | None:
        """A query-string parameter's first value."""
        values = self.query.get(name)
        return values[0] if values else None

    def form(self) -> dict[str, str]:
        """The body as an ``application/x-www-form-urlencoded`` form."""
        return {key: values[0] for key, values in parse_qs(self.body.decode("utf-8")).items()}

    def json(self) -> Any:
        return json.loads(self.body or b"null")


Handler = Callable[[Seen], Reply]


class FakeHTTPServer:
    """Answers every request with ``handler(seen)``, unless a queued ``Reply`` (a fault) comes first."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1") -> None:
        assert is_loopback(host), host
        self.handler = handler
        self.host = host
        self.requests: list[Seen] = []
        self._queued: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeHTTPServer:
        owner = self

        class _Handler(FakeServerHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner._serve(self)

            def do_POST(self) -> None:
                owner._serve(self)

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        self._httpd = ThreadingHTTPServer((self.host, 0), _Handler)
        self._thread = serve_in_thread(self._httpd, "fake-http")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()  # releases handlers parked in a delay
        if self._httpd is not None:
            shut_down(self._httpd, self._thread)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "use FakeHTTPServer as a context manager"
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    def inject(self, *replies: Reply) -> None:
        """Queue replies; each request takes the oldest one before the handler is asked."""
        with self._lock:
            self._queued.extend(replies)

    def _serve(self, http: BaseHTTPRequestHandler) -> None:
        length = int(http.headers.get("Content-Length") or 0)
        parts = urlsplit(http.path)
        seen = Seen(
            method=http.command,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers={name.lower(): value for name, value in http.headers.items()},
            body=http.rfile.read(length) if length else b"",
            client_port=http.client_address[1],
        )
        with self._lock:
            self.requests.append(seen)
            reply = self._queued.popleft() if self._queued else None
        if reply is None:
            reply = self.handler(seen)
        if reply.delay:
            self._stopping.wait(reply.delay)
        send_body(http, reply.status, *reply.encoded())


# ---------------------------------------------------------------- the loopback guard


def is_loopback(host: object) -> bool:
    """``localhost`` or a literal loopback address (127.0.0.0/8, ::1); anything else is not."""
    if isinstance(host, bytes):
        host = host.decode("ascii", errors="replace")
    if not isinstance(host, str):
        return False
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


# The functions the guard calls through once a host has passed; a test can swap them to prove
# the guard stops a request before it reaches them.
REAL: dict[str, Callable[..., Any]] = {
    "getaddrinfo": socket.getaddrinfo,
    "gethostbyname": socket.gethostbyname,
    "gethostbyname_ex": socket.gethostbyname_ex,
    "connect": socket.socket.connect,
    "connect_ex": socket.socket.connect_ex,
}


@dataclass
class LoopbackGuard:
    """Refuses (and records) DNS look-ups of, and connections to, anything but loopback."""

    violations: list[str] = field(default_factory=list)

    def refuse(self, what: str) -> OSError:
        self.violations.append(what)
        return OSError(f"loopback guard: refused {what}")

    def check_address(self, sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address[0]):
            raise self.refuse(f"connection to {address!r}")

    def check_url(self, url: object) -> None:
        if not is_loopback(urlsplit(str(url)).hostname):
            raise self.refuse(f"request to {url!r}")


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackGuard]:
    """Patch the socket layer (httpx, requests) and ddgs' client (primp is Rust, below Python's
    sockets) so that only loopback can be reached; the test fails if anything else was tried."""
    guard = LoopbackGuard()

    def resolver(name: str) -> Callable[..., Any]:
        def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_loopback(host):
                raise guard.refuse(f"DNS look-up of {host!r}")
            return REAL[name](host, *args, **kwargs)

        return resolve

    def connect(sock: socket.socket, address: Any) -> None:
        guard.check_address(sock, address)
        return REAL["connect"](sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        guard.check_address(sock, address)
        return REAL["connect_ex"](sock, address)

    from ddgs.http_client import HttpClient

    real_ddgs_request = HttpClient.request

    def ddgs_request(client: HttpClient, *args: Any, **kwargs: Any) -> Any:
        guard.check_url(args[1] if len(args) > 1 else kwargs.get("url"))
        return real_ddgs_request(client, *args, **kwargs)

    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        monkeypatch.setattr(socket, name, resolver(name))
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(HttpClient, "request", ddgs_request)
    yield guard
    assert not guard.violations, f"non-loopback traffic attempted: {guard.violations}"


def fake_speech(seen: Seen) -> Reply:
    """An OpenAI-compatible ``/v1/audio/speech`` whose "audio" is ``[voice:first 12 characters]``,
    so a test sees which voice read which line, and in what order the clips were joined."""
    body = seen.json()
    return Reply(body=f"[{body['voice']}:{body['input'][:12]}]".encode(), headers={"Content-Type": "audio/mpeg"})
