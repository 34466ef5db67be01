"""A loopback fake of the Tavily search API, serving a small bundled corpus.

Why it exists: the offline demo and the tests must exercise the *real* ``tavily-python`` client,
request and error handling included, without touching the internet. So this server speaks the
wire protocol that client speaks (``POST /search``, JSON body, ``Authorization: Bearer <key>``,
errors as ``{"detail": {"error": ...}}`` with Tavily's status codes) and ranks
``offline/corpus.json`` with BM25 (:mod:`offline.search_index`), answering only with documents
that are about the query, so a question the corpus does not cover gets no results rather than
unrelated ones. Faults (5xx, 429 with ``Retry-After``, 401, slow answers) can
be queued so tests can drive every error path of the ``web_search`` activity.

Only the standard library is used, so the server starts anywhere the package is installed.

Run it in the foreground with ``python -m offline.search_server --port 18081``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from offline.loopback_http import FakeServerHandler, send_json, serve_in_thread, shut_down
from offline.search_index import DEFAULT_CORPUS, DEFAULT_MAX_RESULTS, Hit, SearchIndex

logger = logging.getLogger(__name__)

DEFAULT_API_KEY = "offline"
MAX_RESULTS_LIMIT = 20  # Tavily rejects larger values


# ---------------------------------------------------------------- faults


@dataclass(frozen=True)
class Fault:
    """What the next request suffers: a delay, then (optionally) an error status instead of results."""

    status: int | None = None
    retry_after: float | None = None  # sent as the Retry-After header (seconds)
    delay_seconds: float = 0.0
    message: str | None = None

    @classmethod
    def http(cls, status: int, message: str | None = None) -> Fault:
        """Answer with this HTTP status and a Tavily-shaped error body."""
        return cls(status=status, message=message)

    @classmethod
    def rate_limited(cls, retry_after: float | None = None) -> Fault:
        """A 429, with ``Retry-After`` when given."""
        return cls(status=429, retry_after=retry_after)

    @classmethod
    def timeout(cls, seconds: float) -> Fault:
        """Hold the answer for ``seconds``, so a client with a shorter timeout gives up."""
        return cls(delay_seconds=seconds)


def _as_fault(fault: Fault | int) -> Fault:
    return fault if isinstance(fault, Fault) else Fault.http(int(fault))


# ---------------------------------------------------------------- HTTP layer


class _RequestError(Exception):
    """Raised while handling a request to answer with a Tavily-shaped error."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class _HTTPServer(ThreadingHTTPServer):
    # Handler threads may be parked in an injected delay; they must not keep the process alive
    # or make ``stop()`` wait for them.
    daemon_threads = True

    def __init__(self, address: tuple[str, int], owner: FakeSearchServer) -> None:
        super().__init__(address, _Handler)
        self.owner = owner


class _Handler(FakeServerHandler):
    server_version = "FakeTavily/1.0"
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx/requests expect from a real API

    @property
    def owner(self) -> FakeSearchServer:
        return cast(_HTTPServer, self.server).owner

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        """``GET /health`` lets scripts and compose check readiness without a key."""
        self._read_body()
        self.owner._record(self, None)
        if self.path.rstrip("/") in ("", "/health"):
            send_json(self, 200, {"status": "ok", "documents": len(self.owner.index.documents)})
        else:
            self._send_error(_RequestError(404, f"Not found: {self.path}"))

    def do_POST(self) -> None:
        raw = self._read_body()
        body = _parse_json(raw)
        self.owner._record(self, body)
        try:
            send_json(self, 200, self.owner._answer(self.path, dict(self.headers), body))
        except _RequestError as error:
            self._send_error(error)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_error(self, error: _RequestError) -> None:
        send_json(self, error.status, {"detail": {"error": error.message}}, error.headers)



def _parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


def _bearer_token(headers: dict[str, str]) -> str | None:
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _int_field(body: dict[str, Any], name: str, default: int, upper: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= upper:
        raise _RequestError(400, f"{name} must be an integer between 0 and {upper}")
    return value


def _string_list(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _RequestError(400, f"{name} must be a list of strings")
    return value


# ---------------------------------------------------------------- the server


class FakeSearchServer:
    """A Tavily look-alike on loopback. Use as a context manager or with ``start``/``stop``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        corpus_path: Path | None = None,
        api_key: str = DEFAULT_API_KEY,
        latency_seconds: float = 0.0,
    ) -> None:
        self.host = host
        self.port = port
        self.api_key = api_key
        self.latency_seconds = latency_seconds
        self.index = SearchIndex.from_file(corpus_path or DEFAULT_CORPUS)
        self.requests: list[dict[str, Any]] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FakeSearchServer:
        """Bind and serve in a daemon thread; ``port=0`` picks a free port (see ``base_url``)."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        self._thread = serve_in_thread(self._httpd, f"fake-tavily-{self.port}")
        return self

    def stop(self) -> None:
        """Stop serving; handlers parked in an injected delay are released at once."""
        self._stopping.set()
        if self._httpd is None:
            return
        shut_down(self._httpd, self._thread)
        self._httpd = None
        self._thread = None

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the ``python -m`` entry point)."""
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        logger.info(
            "Fake Tavily on %s (%d documents, api key %r); Ctrl-C stops it.",
            self.base_url,
            len(self.index.documents),
            self.api_key,
        )
        try:
            self._httpd.serve_forever()
        finally:
            self._stopping.set()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeSearchServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """What to give ``TavilyClient(api_base_url=...)`` / ``TAVILY_BASE_URL``."""
        if self._httpd is None:
            raise RuntimeError("FakeSearchServer is not running; call start() first")
        return f"http://{self.host}:{self.port}"

    # -- test controls

    def inject(self, *faults: Fault | int) -> None:
        """Queue faults; each request takes the oldest one. A bare int is an HTTP status."""
        with self._lock:
            self._faults.extend(_as_fault(fault) for fault in faults)

    def clear_faults(self) -> None:
        """Forget queued faults and recorded requests."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()

    # -- request handling (called from handler threads)

    def _record(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        entry = {
            "method": handler.command,
            "path": handler.path,
            "headers": dict(handler.headers),
            "body": body,
            "time": time.time(),
        }
        with self._lock:
            self.requests.append(entry)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> dict[str, Any]:
        """Apply latency and faults, then check the request and run the search."""
        started = time.monotonic()
        fault = self._next_fault()
        self._stopping.wait(self.latency_seconds + (fault.delay_seconds if fault else 0.0))
        if fault is not None and fault.status is not None:
            raise _fault_error(fault)
        if path.rstrip("/") != "/search":
            raise _RequestError(404, f"Not found: {path}")
        if not isinstance(body, dict):
            raise _RequestError(400, "Request body must be a JSON object")
        self._check_key(headers, body)
        return self._search(body, started)

    def _check_key(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        # Current clients send a bearer token; older ones put ``api_key`` in the body.
        key = _bearer_token(headers) or body.get("api_key")
        if key != self.api_key:
            raise _RequestError(401, "Unauthorized: missing or invalid API key.")

    def _search(self, body: dict[str, Any], started: float) -> dict[str, Any]:
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise _RequestError(400, "query is required")
        max_results = _int_field(body, "max_results", DEFAULT_MAX_RESULTS, MAX_RESULTS_LIMIT)
        hits = self.index.search(
            query,
            max_results,
            _string_list(body, "include_domains"),
            _string_list(body, "exclude_domains"),
        )
        response: dict[str, Any] = {
            "query": query,
            "follow_up_questions": None,
            "answer": _answer_text(hits) if body.get("include_answer") else None,
            "images": [],
            "results": [_result(hit, bool(body.get("include_raw_content"))) for hit in hits],
            "response_time": round(time.monotonic() - started, 3),
            "request_id": str(uuid.uuid4()),
        }
        if body.get("include_usage"):
            response["usage"] = {"credits": 1}
        return response


def _fault_error(fault: Fault) -> _RequestError:
    status = cast(int, fault.status)
    headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return _RequestError(status, fault.message or f"Injected fault: {status} {phrase}", headers)


def _result(hit: Hit, include_raw_content: bool) -> dict[str, Any]:
    doc = hit.document
    return {
        "title": doc.title,
        "url": doc.url,
        "content": doc.content,
        "score": hit.score,
        "raw_content": doc.content if include_raw_content else None,
        "published_date": doc.published_date,
    }


def _answer_text(hits: list[Hit]) -> str | None:
    """A stand-in for Tavily's generated answer: the best document's first sentence."""
    if not hits:
        return None
    content = hits[0].document.content
    sentence = re.split(r"(?<=[.!?\u3002\uff01\uff1f])\s*", content, maxsplit=1)[0]
    return sentence.strip() or None


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> None:
    """Serve the fake in the foreground, e.g. for the offline demo or manual poking with curl."""
    parser = argparse.ArgumentParser(description="Offline fake of the Tavily search API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18081)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    server = FakeSearchServer(args.host, args.port, args.corpus, args.api_key, args.latency)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
