"""The page survives everything behind it: mid-run, the worker is SIGKILLed and the API server
restarted, and the page, left alone, reconnects from its last item and shows the run to its report.

Its own module, so its dev server has no other worker that could quietly take over the run.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.support.cdp import Page, chromium_path
from tests.support.processes import DevServer, ServeProcess, WorkerProcess, free_port, wait_for_worker
from workflows.contracts.status import Phase, RunStatus

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(150),
]
SLOW = "1.0"  # the first worker's model latency, so the kill lands inside a model call
QUICK = "0.1"  # the replacement's: what is left of the run need not wait a second a call


async def start_worker(dev_server: DevServer, client: Client, log: Path, latency: str) -> WorkerProcess:
    # Its own home, shared with the serve process: the blobs both read, and the token-stream
    # announcement a killed serve leaves behind (never in the checkout's .deerflow).
    env = {"DEERFLOW_OFFLINE_MODEL_LATENCY": latency, "DEERFLOW_HOME": str(log.parent / "home")}
    process = WorkerProcess(dev_server.address, log, env=env).start()
    await wait_for_worker(client, log)
    return process


def feed_items(text: str) -> list[tuple[str, dict]]:
    blocks = [dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
              for block in text.split("\n\n") if block.strip()]
    return [(b["event"], json.loads(b["data"])) for b in blocks if b.get("event") not in (None, "end")]


async def test_page_recovers_after_worker_kill_and_server_restart(dev_server: DevServer, client: Client,
                                                                  page: Page, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = await start_worker(dev_server, client, tmp_path / "first.log", SLOW)
    second: WorkerProcess | None = None
    server = ServeProcess(dev_server.address, port, tmp_path / "serve.log", tmp_path / "home")
    try:
        await page.navigate(f"{url}/")
        await page.wait_for("typeof DOMPurify !== 'undefined'", what="the page")
        await page.evaluate("document.getElementById('question').value = "
                            "'What are the prospects of solid-state batteries for electric vehicles?';"
                            "document.getElementById('auto-accept').checked = true;"
                            "document.querySelector('#new-run button[type=submit]').click(); true")
        run = await page.wait_for("window.deerflowPage.state.run", 30, what="the run to start")
        handle = client.get_workflow_handle(run)
        deadline = time.monotonic() + 60
        while (await handle.query("status", result_type=RunStatus)).phase is not Phase.RESEARCHING:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        await page.wait_for("document.getElementById('activity').children.length > 0", 30, what="progress")
        server.kill()  # the server and the worker die while the run is researching
        first.kill()
        await asyncio.sleep(1.0)
        second = await start_worker(dev_server, client, tmp_path / "second.log", QUICK)
        server = ServeProcess(dev_server.address, port, tmp_path / "serve.log", tmp_path / "home")
        await page.wait_for("document.getElementById('citations').children.length > 0", 120,
                            what="the report after recovery")
        async with httpx.AsyncClient(timeout=30) as http:
            feed = feed_items((await http.get(f"{url}/api/runs/{run}/events")).text)
        shown = await page.evaluate("document.getElementById('activity').children.length")
    finally:
        server.kill()
        first.kill()
        if second is not None:
            second.stop()
    # Every call and message shown once: the page resumed from its offset, no duplicate and no gap.
    expected = sum(len(d["tool_calls"]) for k, d in feed if k == "tool_calls") + sum(
        1 for k, d in feed if k == "message_chunk" and d.get("content") and d["agent"] not in ("planner", "reporter"))
    assert shown == expected
    assert await page.evaluate("document.querySelector('#report h1') !== null")
