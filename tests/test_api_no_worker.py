"""The API server when the worker that ran a run has died and none has replaced it: the page's
review button and DeerFlow's interrupt feedback are answered (504, or an ``error`` event in
DeerFlow's 200 stream) after a bounded wait, instead of hanging for as long as the deployment's
workers are down (the server holds an update for a worker it has seen poll, for good); the page, in
headless Chromium, says the decision was sent and not taken yet. The run view, whose status query
the server would hold for about 30 s, shows where the server's index has the run after a bounded
wait, and says that no worker has answered.

Its own module, so its dev server has no other worker that could take the run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from server import decisions, runs
from tests.support.cdp import Page, chromium_path
from tests.support.processes import DevServer, WorkerProcess, wait_for_worker
from tests.support.runs import awaiting_review, wait_for
from tests.support.web_server import api_server, parse_sse

pytestmark = [
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(150),
]
QUESTION = "What is rain?"
WAIT = 1.0


@contextlib.asynccontextmanager
async def page_server_and_worker(dev_server: DevServer, client: Client, tmp_path: Path,
                                 ) -> AsyncIterator[tuple[str, httpx.AsyncClient, WorkerProcess]]:
    """The API server (no token), a client of it, and a worker of the offline model, which the test
    kills once its run awaits what the test needs (it is killed again on the way out)."""
    settings = load_settings().model_copy(update={"web_token": None})
    worker = WorkerProcess(dev_server.address, tmp_path / "worker.log",
                           env={"DEERFLOW_OFFLINE_MODEL_LATENCY": "0.05"}).start()
    try:
        await wait_for_worker(client, tmp_path / "worker.log")
        async with api_server(client, settings) as base, httpx.AsyncClient(timeout=60) as http:
            yield base, http, worker
    finally:
        worker.kill()


async def test_a_decision_no_worker_takes_is_answered_not_left_hanging(
        dev_server: DevServer, client: Client, page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decisions, "DECISION_WAIT_SECONDS", WAIT)
    async with page_server_and_worker(dev_server, client, tmp_path) as (base, http, worker):
        run = (await http.post(f"{base}/api/runs", json={"question": QUESTION})).json()["id"]
        thread = "no-worker-thread"
        turn = {"messages": [{"role": "user", "content": QUESTION}], "thread_id": thread,
                "auto_accepted_plan": False}
        first = parse_sse((await http.post(f"{base}/api/chat/stream", json=turn)).text)
        assert first[-1][0] == "interrupt", first  # the thread's plan awaits its review
        await wait_for(client.get_workflow_handle(run), awaiting_review, 90)
        await page.navigate(f"{base}/")
        await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", what="the page")
        await page.evaluate(f"window.deerflowPage.openRun({run!r}); true")
        await page.wait_for("!document.getElementById('review').hidden", 60, what="the review buttons")
        worker.kill()

        await page.press("#accept")
        said = await page.wait_for("document.getElementById('review-message').textContent", 30,
                                   what="the page's word on the decision")
        assert said.startswith("Sent, not taken yet: no worker took the decision in time"), said

        began = time.monotonic()
        reviewed = await http.post(f"{base}/api/runs/{run}/review", json={"accept": True})
        waited = time.monotonic() - began
        assert reviewed.status_code == 504, reviewed.text
        assert "no worker took the decision in time" in reviewed.json()["detail"]
        assert "reload the run before sending it again" in reviewed.json()["detail"]
        assert WAIT <= waited < WAIT + 10, waited

        feedback = {**turn, "messages": [{"role": "user", "content": "go"}], "interrupt_feedback": "accepted"}
        events = parse_sse((await http.post(f"{base}/api/chat/stream", json=feedback)).text)
        assert events[0][0] == "error" and "no worker took the decision in time" in events[0][1]["error"], events


async def test_a_run_no_worker_answers_for_is_shown_from_the_index(
        dev_server: DevServer, client: Client, page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "STATUS_WAIT_SECONDS", WAIT)
    async with page_server_and_worker(dev_server, client, tmp_path) as (base, http, worker):
        run = (await http.post(f"{base}/api/runs", json={"question": QUESTION})).json()["id"]
        await wait_for(client.get_workflow_handle(run), awaiting_review, 90)
        worker.kill()

        began = time.monotonic()
        shown = (await http.get(f"{base}/api/runs/{run}")).json()
        waited = time.monotonic() - began
        assert shown["status"] == "running" and shown["run"] is None, shown
        assert shown["indexed"] == {"phase": "awaiting_review", "awaiting": "plan_feedback"}, shown
        assert WAIT <= waited < WAIT + 10, waited

        await page.navigate(f"{base}/")
        await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", what="the page")
        await page.evaluate(f"window.deerflowPage.openRun({run!r}); true")
        said = await page.wait_for("document.getElementById('run-phase').textContent", 30,
                                   what="the run's phase")
        assert said == ("Now: waiting for a review of its plan, as the server's index has it: "
                        "no worker has answered (is one running?)"), said
