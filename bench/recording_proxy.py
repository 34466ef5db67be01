"""A loopback proxy in front of a model server that notes what each chat request asked for (issue #24).

Why: "every call is capped" is a claim about the requests themselves (the probe's and a discarded
native reply's too), which a run's history does not hold; the bench passes the worker this proxy's
URL and reads the notes. Bodies are forwarded as they are and answers returned whole (a streamed
answer arrives at once: the previews lose their pace, not their text).
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from offline.loopback_http import FakeServerHandler, send_body, serve_in_thread, shut_down

# No proxy from the environment: the upstream is on loopback, and must be reached directly.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# The headers passed on: of the request, what the server reads; of the answer, what a client parses.
REQUEST_HEADERS = ("content-type", "authorization")
KEPT_HEADERS = ("Content-Type",)


@dataclass(frozen=True)
class Seen:
    """One chat request: its output cap (None: uncapped), whether it offered tools, its response format."""

    cap: int | None
    tools: bool
    response_format: str | None


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    seen: list[Seen]


class _Handler(FakeServerHandler):
    server: _Proxy

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/").endswith("/chat/completions"):
            request = json.loads(body)
            cap = request.get("max_completion_tokens") or request.get("max_tokens")
            self.server.seen.append(Seen(int(cap) if cap else None, bool(request.get("tools")),
                                         (request.get("response_format") or {}).get("type")))
        self._forward(body)

    def _forward(self, body: bytes | None) -> None:
        headers = {name: value for name, value in self.headers.items() if name.lower() in REQUEST_HEADERS}
        upstream = urllib.request.Request(self.server.upstream + self.path, data=body, headers=headers,
                                          method=self.command)
        try:
            with _OPENER.open(upstream, timeout=3600) as answer:
                status, data, answer_headers = answer.status, answer.read(), answer.headers
        except urllib.error.HTTPError as error:
            status, data, answer_headers = error.code, error.read(), error.headers
        send_body(self, status, data, {name: answer_headers[name] for name in KEPT_HEADERS if name in answer_headers})

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a bench prints figures, not access logs."""


@contextlib.contextmanager
def recording_proxy(upstream: str) -> Iterator[tuple[str, list[Seen]]]:
    """Serve a proxy to ``upstream`` (``http://host:port``, no path) on 127.0.0.1; yields its base URL
    and the list its chat requests are noted in."""
    proxy = _Proxy(("127.0.0.1", 0), _Handler)
    proxy.upstream, proxy.seen = upstream.rstrip("/"), []
    thread = serve_in_thread(proxy, "bench-model-proxy")
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}", proxy.seen
    finally:
        shut_down(proxy, thread)
