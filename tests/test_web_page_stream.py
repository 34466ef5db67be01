"""Our page in headless Chromium shows a model turn's token previews, then the final message in
their place, once: a stand-in run whose ``chat`` activity previews its report through the API
server's sink and then waits for the test before it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from config.settings import load_settings
from server.live import TokenHub
from tests.support.cdp import Page, chromium_path
from tests.support.runs import run_id
from tests.support.web_server import api_server
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse
from workflows.contracts.research import WORKFLOW_TYPE, ResearchResult
from workflows.contracts.status import Phase, RunStatus

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(90),
]
TOKEN = "stream-token-for-page-0123456789ab"
PIECES = ["# Streamed report\n\n", "Heat pumps move heat ", "instead of making it"]
FINAL = "".join(PIECES) + ", which is why they are efficient.\n"
QUEUE = "streamed-runs"


@workflow.defn(name=WORKFLOW_TYPE, sandboxed=False)  # the module imports test helpers
class StreamedRun:
    """Stands in for a research run: one reporter turn, then the report."""

    @workflow.run
    async def run(self, question: str) -> ResearchResult:
        request = ChatRequest(prompt="reporter", messages=[ChatMessage(role="user", content=question)])
        response = await workflow.execute_activity("chat", request, result_type=ChatResponse,
                                                   start_to_close_timeout=timedelta(seconds=60))
        return ResearchResult(report=response.message.content)

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return RunStatus(phase=Phase.REPORTING)


class Reporter:
    """The ``chat`` activity, scripted: previews its pieces to the sink, then waits for ``release``."""

    def __init__(self, sink: str) -> None:
        self.sink = sink
        self.go = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name="chat")
    async def chat(self, request: ChatRequest) -> ChatResponse:
        info = activity.info()
        head = {"workflow_id": info.workflow_id, "run_id": info.workflow_run_id, "activity_id": info.activity_id,
                "attempt": info.attempt, "agent": request.prompt}
        offset = 0
        await self.go.wait()
        async with httpx.AsyncClient() as http:
            for piece in PIECES:
                delta = head | {"offset": offset, "text": piece}
                response = await http.post(self.sink, json={"deltas": [delta]},
                                           headers={"Authorization": f"Bearer {TOKEN}"})
                assert response.status_code == 204, response.text
                offset += len(piece)
        await self.release.wait()
        return ChatResponse(message=ChatMessage(role="assistant", content=FINAL))


SETTINGS = load_settings().model_copy(update={"web_token": None, "token_stream_token": TOKEN})


@pytest.fixture
def hub() -> TokenHub:
    return TokenHub(SETTINGS)


@pytest.fixture
async def base(client: Client, hub: TokenHub) -> AsyncIterator[str]:
    async with api_server(client, SETTINGS, hub=hub) as url:
        yield url


@pytest.fixture
async def reporter(base: str, client: Client) -> AsyncIterator[Reporter]:
    """The stand-in's worker, alive until the page is closed (the page queries the run's status)."""
    scripted = Reporter(f"{base}/internal/token-stream")
    async with Worker(client, task_queue=QUEUE, workflows=[StreamedRun], activities=[scripted.chat]):
        yield scripted
        scripted.release.set()


async def test_the_page_shows_previews_then_the_final_report_once(base: str, client: Client, hub: TokenHub,
                                                                  reporter: Reporter, page: Page) -> None:
    workflow_id = run_id("streamed")
    handle = await client.start_workflow(StreamedRun.run, "How do heat pumps work?", id=workflow_id,
                                         task_queue=QUEUE)
    await page.navigate(f"{base}/?run={workflow_id}")
    # Previews reach the streams open at the time: the turn generates once the page follows the run.
    while not hub.following(workflow_id):
        await asyncio.sleep(0.05)
    reporter.go.set()
    await page.wait_for("document.getElementById('report').innerText.includes('instead of making it')", 30,
                        what="the streamed preview")
    assert not await page.evaluate("document.getElementById('report').innerText.includes('efficient')")
    reporter.release.set()
    await handle.result()
    await page.wait_for("document.getElementById('report').innerText.includes('efficient')", 30,
                        what="the final report")
    text = await page.evaluate("document.getElementById('report').innerText")
    assert text.count("Heat pumps move heat") == 1 and text.count("Streamed report") == 1, text
    assert await page.evaluate("document.querySelectorAll('.preview').length") == 0
    for _ in range(100):
        if not hub.following(workflow_id):
            break
        await asyncio.sleep(0.1)
    assert hub.following(workflow_id) == 0, "the page's stream ended with the run"
