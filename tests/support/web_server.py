"""The API server for protocol and page tests: in the test's own event loop on a free loopback
port, or as ``starter.py serve`` in its own process (its log and its crashes its own)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import uvicorn
from temporalio.client import Client

from config.settings import Settings
from server.app import create_app
from server.live import TokenHub
from tests.support.processes import free_port


@contextlib.asynccontextmanager
async def api_server(client: Client, settings: Settings, keep_alive: float = 15.0,
                     hub: TokenHub | None = None, port: int | None = None) -> AsyncIterator[str]:
    """Serve the app until the block ends (on ``port``, else a free one); yields its base URL."""
    port = port or free_port()
    app = create_app(client, settings, keep_alive=keep_alive, hub=hub)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="off",
                                           # As `starter.py serve`: a stream the browser left open
                                           # must not hold the teardown (a CI run timed out on one).
                                           timeout_graceful_shutdown=2))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, 10)
        except asyncio.CancelledError:
            pass
        except TimeoutError:
            raise AssertionError("the API server did not stop within 10 s of its 2 s grace") from None


def parse_sse(text: str) -> list[tuple[str, dict]]:
    """Events as DeerFlow's client reads them: blocks split on a blank line, comments skipped."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events
