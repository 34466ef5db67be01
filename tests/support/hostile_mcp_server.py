"""An MCP server over stdio that writes what a careless one does: lone surrogates and broken UTF-8.

Why by hand, not on the SDK's server: the SDK's serializer refuses a lone surrogate, so it could
never send one. Servers built on other stacks do: JavaScript's ``JSON.stringify`` writes a string
cut between the halves of a pair (an emoji sliced at a length limit) as a ``"\\ud83d"`` escape, and
a server that relays a subprocess's or a page's bytes can put bytes on the wire that are not
UTF-8 at all. Every message is one line of JSON-RPC, as the stdio transport frames them.

Run as ``python hostile_mcp_server.py escapes|bytes``: ``escapes`` writes each lone surrogate as
its JSON escape (valid JSON a strict parser still refuses), ``bytes`` writes them as raw bytes
that are not UTF-8 (the encoded surrogates, and a stray 0xFF). Its one tool, ``lookup``, answers
:data:`HOSTILE` in its description and its result.
"""

from __future__ import annotations

import json
import sys
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
    return json.dumps(answer).encode("ascii").replace(MARK.encode("ascii"), hostile) + b"\n"


def main() -> None:
    mode = sys.argv[1]
    for raw in sys.stdin.buffer:
        answer = _answer(json.loads(raw))
        if answer is not None:
            sys.stdout.buffer.write(_line(answer, mode))
            sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
