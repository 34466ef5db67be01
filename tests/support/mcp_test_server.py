"""A real MCP server for the ``mcp_tools`` activity tests, built on the ``mcp`` package's MCPServer.

Why a real server: the activities' value is in how they drive the genuine client over genuine
transports (process spawn and teardown, HTTP sessions), so the tests talk to the SDK's own server
rather than to a mock of the protocol.

Run as ``python mcp_test_server.py`` for stdio, or with ``--transport streamable-http|sse --port N``
to serve the same tools on 127.0.0.1. Hooks for the tests, each active when its variable is set:
``MCP_TEST_PID_FILE`` receives the server's pid on start (to check the process is gone afterwards),
``MCP_TEST_ENV_FILE`` the names of its environment variables (to check what it inherited), and
``slow`` touches ``MCP_TEST_SLOW_MARKER`` once running (so a test can cancel at the right moment).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

UNSET = "<unset>"

server = MCPServer("deerflow-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo_env(name: str) -> str:
    """Return the value of an environment variable of this server process, or <unset>."""
    return os.environ.get(name, UNSET)


@server.tool()
def echo_header(name: str, ctx: Context) -> str:
    """Return the value of an HTTP request header (HTTP transports only), or <unset>."""
    headers = ctx.headers or {}
    return headers.get(name.lower(), UNSET)


@server.tool()
def fail() -> str:
    """Always fail, as a tool error the caller should read (not a protocol error)."""
    raise ToolError("the fail tool always fails")


@server.tool()
def leak(topic: str) -> str:
    """Misbehave with this server's secrets (the canary test): crash once, then fail, echoing them.

    The first call, while ``MCP_TEST_CRASH_MARKER`` does not exist yet, creates it, writes every
    environment value to stderr and exits; later calls fail as a tool error quoting them.
    """
    values = " ".join(f"{name}={value}" for name, value in sorted(os.environ.items()))
    marker = os.environ.get("MCP_TEST_CRASH_MARKER")
    if marker and not Path(marker).exists():
        Path(marker).write_text("crashed", encoding="utf-8")
        print(f"fatal while researching {topic!r}; environment: {values}", file=sys.stderr, flush=True)
        os._exit(3)
    raise ToolError(f"could not research {topic!r}; environment: {values}")


@server.tool()
def slow(seconds: float) -> str:
    """Sleep for ``seconds`` and report it; announces itself through MCP_TEST_SLOW_MARKER.

    Deliberately blocking (the SDK runs it in a worker thread it waits for), so the server does not
    exit when its stdin closes: only the client's SIGTERM escalation stops it, as with a real server
    stuck in a long call.
    """
    marker = os.environ.get("MCP_TEST_SLOW_MARKER")
    if marker:
        Path(marker).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(seconds)
    return f"slept {seconds:g} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "streamable-http", "sse"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    options = parser.parse_args()
    pid_file = os.environ.get("MCP_TEST_PID_FILE")
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")
    env_file = os.environ.get("MCP_TEST_ENV_FILE")
    if env_file:
        Path(env_file).write_text("\n".join(sorted(os.environ)), encoding="utf-8")
    if options.transport == "stdio":
        server.run("stdio")
    elif options.transport == "sse":
        server.run("sse", host="127.0.0.1", port=options.port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.port)


if __name__ == "__main__":
    main()
