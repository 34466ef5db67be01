"""The API server for protocol and page tests: in the test's own event loop on a free loopback
port, or as ``starter.py serve`` in its own process (its log and its crashes its own)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from temporalio.client import Client

from config.settings import Settings
from server.app import create_app
from server.live import TokenHub
from tests.processes import REPO_DIR, free_port, wait_for_port


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


class ServeProcess:
    """``starter.py serve`` as its own process, so killing it drops every connection, as a crash does.

    Its home is ``log``'s folder's ``home`` (blobs, the token-stream announcement); ``env`` adds to
    the test's environment, without its ``DEERFLOW_WEB_*`` settings.
    """

    def __init__(self, address: str, port: int, log: Path, env: dict[str, str] | None = None) -> None:
        base = {key: value for key, value in os.environ.items() if not key.startswith("DEERFLOW_WEB_")}
        base.update({"TEMPORAL_ADDRESS": address, "DEERFLOW_HOME": str(log.parent / "home"), **(env or {})})
        self.process = subprocess.Popen([sys.executable, str(REPO_DIR / "starter.py"), "serve", "--port", str(port)],
                                        cwd=REPO_DIR, env=base, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        wait_for_port(port)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def parse_sse(text: str) -> list[tuple[str, dict]]:
    """Events as DeerFlow's client reads them: blocks split on a blank line, comments skipped."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events
