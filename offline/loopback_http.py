"""What every loopback fake shares: writing one whole reply, and serving on a daemon thread.

The offline model, the fake Tavily, the tests' scriptable server and the benchmarks' page server
all answer with the same few header lines and start and stop the same way; one copy keeps their
behaviour alike (a client that hung up is never an error, a stop never waits on a parked handler,
a reply is never held back by Nagle's algorithm).
Standard library only, like the fakes themselves.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from workflows.text.untrusted_text import encodes_as_utf8


class FakeServerHandler(BaseHTTPRequestHandler):
    """The base of every fake's request handler: Nagle's algorithm off (TCP_NODELAY), as a real
    provider's server has it (nginx, Go's net/http and asyncio servers set it).

    Why: a reply goes out as two writes, the headers and then the body (or a stream's chunks). With
    Nagle's algorithm on, the kernel held the body back until the client acknowledged the headers,
    and the client delays that acknowledgement: about 40 ms on 4 or 5 of a run's 11 model replies
    on loopback, which bench/overhead.py then counted as the worker's hop, and which slowed the
    offline demonstration and every test's fake alike.
    """

    disable_nagle_algorithm = True


def send_body(handler: BaseHTTPRequestHandler, status: int, data: bytes, headers: Mapping[str, str]) -> None:
    """Status, ``headers``, Content-Length and ``data``; a client already gone (its timeout fired) is ignored."""
    try:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True


def wire_json(value: Any) -> str:
    """``value`` as JSON text for the wire: non-ASCII kept as is, as servers send it, unless it holds
    a lone surrogate (which UTF-8 cannot carry): then escaped, as a real server sends "\\ud800"."""
    text = json.dumps(value, ensure_ascii=False)
    return text if encodes_as_utf8(text) else json.dumps(value)


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any,
              headers: Mapping[str, str] | None = None) -> None:
    """``payload`` as a JSON reply (UTF-8; see :func:`wire_json`)."""
    data = wire_json(payload).encode("utf-8")
    send_body(handler, status, data, {"Content-Type": "application/json", **(headers or {})})


def serve_in_thread(httpd: ThreadingHTTPServer, name: str) -> threading.Thread:
    """Serve ``httpd`` on a daemon thread, polling often so that :func:`shut_down` is quick.

    Handler threads are made daemons too: one parked in an injected delay must not keep the
    process alive.
    """
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
    thread.start()
    return thread


def shut_down(httpd: ThreadingHTTPServer, thread: threading.Thread | None) -> None:
    """Stop serving, close the socket and wait (briefly) for the serving thread."""
    if thread is not None:
        httpd.shutdown()
        thread.join(timeout=5)
    httpd.server_close()
