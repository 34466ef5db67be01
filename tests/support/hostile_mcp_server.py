"""An MCP server over stdio that writes what a careless one does: lone surrogates and broken UTF-8.

Why by hand, not on the SDK's server: the SDK's serializer refuses a lone surrogate, so it could
never send one. Servers built on other stacks do: JavaScript's ``JSON.stringify`` writes a string
cut between the halves of a pair (an emoji sliced at a length limit) as a ``"\\ud83d"`` escape, and
a server that relays a subprocess's or a page's bytes can put bytes on the wire that are not
UTF-8 at all. Every message is one line of JSON-RPC, as the stdio transport frames them.

Run as ``python hostile_mcp_server.py escapes|bytes``: ``escapes`` writes each lone surrogate as
its JSON escape (valid JSON a strict parser still refuses), ``bytes`` writes them as raw bytes
that are not UTF-8 (the encoded surrogates, and a stray 0xFF). Its one tool, ``lookup``, answers
:data:`HOSTILE` in its description and its result. With ``--port N`` it serves streamable HTTP on
127.0.0.1 instead (each answer a JSON body, or with ``--events`` one event of an event stream, as
the TypeScript SDK's servers answer by default).
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Lone halves of a pair (high, then low), a pair written as two escapes (the emoji it stands for).
HOSTILE = "lone \ud800 high, lone \udfff low, cut emoji \ud83d|, whole pair \ud83d\ude00 end"
MARK = "HOSTILE-TEXT-HERE"


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification: no answer
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1"},
        }
    elif method == "tools/list":
        schema = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}
        result = {"tools": [{"name": "lookup", "description": f"Looks things up: {MARK}", "inputSchema": schema}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": f"Found: {MARK}"}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "method not found"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _line(answer: dict[str, Any], mode: str) -> bytes:
    """One line of JSON with :data:`HOSTILE` where :data:`MARK` stands, written the way ``mode`` says."""
    if mode == "escapes":
        hostile = json.dumps(HOSTILE)[1:-1].encode("ascii")  # each surrogate as its \\uXXXX escape
    else:
        hostile = HOSTILE.encode("utf-8", "surrogatepass") + b" \xff"
    return json.dumps(answer).encode("ascii").replace(MARK.encode("ascii"), hostile) + b"\n"  # one line


def _http_handler(mode: str, events: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            answer = _answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            if answer is None:
                self._send(202, "application/json", b"")
            elif events:
                event = b"event: message\r\ndata: " + _line(answer, mode).rstrip(b"\n") + b"\r\n\r\n"
                self._send(200, "text/event-stream", event)
            else:
                self._send(200, "application/json", _line(answer, mode))

        def do_GET(self) -> None:  # no stream of the server's own messages
            self._send(405, "text/plain", b"")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            """Quiet."""

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["escapes", "bytes"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--events", action="store_true")
    options = parser.parse_args()
    if options.port is not None:
        ThreadingHTTPServer(("127.0.0.1", options.port), _http_handler(options.mode, options.events)).serve_forever()
    for raw in sys.stdin.buffer:
        answer = _answer(json.loads(raw))
        if answer is not None:
            sys.stdout.buffer.write(_line(answer, options.mode))
            sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
