"""A run cancelled from each route ends cancelled, and every view says so (issue #49 §1, #48 item 5).

Routes: our page (its Cancel, asked first, on a run waiting for its plan's review), ``starter.py
cancel``, DeerFlow's Stop (a client that leaves ``/api/chat/stream``, in DeerFlow's request shape),
the ``temporal`` CLI, and a person's cancel at a budget pause (``starter.py budget --cancel``),
which completed the run before. Views:
``starter.py list``, ``status``, ``watch`` and ``costs``, the API's list, and our page's list and run
view, all read how the run ended from the server.

A dev server, a real worker process on the session's fake model (each reply held a second, so the
runs the CLI, Stop and ``temporal`` cancel are mid-call), the API server with a named token, the CLI as a user runs it,
and headless Chromium.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from config.settings import load_settings
from offline.model_server import FakeModelServer
from offline.providers import PROVIDER_VARIABLES, offline_env
from offline.search_server import FakeSearchServer
from tests.support.cdp import Page, chromium_path
from tests.support.processes import DevServer, WorkerProcess, run_starter, start_worker
from tests.support.web_server import api_server, parse_sse
from workflows.contracts.decisions import OUTSIDE, Actor, Via
from workflows.contracts.status import RunStatus

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(420),
]
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
TOKEN = "dora-token-0123456789"
DORA = Actor(name="dora", via=Via.API)
CAROL = Actor(name="carol", via=Via.CLI)
STOP_RUN = "deerflow-web-cancel_stop.1"
SCREENSHOTS = Path("/tmp/our-page")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, model_server: FakeModelServer,
                 search_server: FakeSearchServer, tmp_path_factory: pytest.TempPathFactory,
                 ) -> AsyncIterator[WorkerProcess]:
    folder = tmp_path_factory.mktemp("routes")
    process = await start_worker(dev_server, client, folder / "worker.log",
                                 DEERFLOW_MODEL_PRICES=json.dumps({"deerflow-offline-demo": {"input": 1, "output": 1}}),
                                 **offline_env(model_server, search_server))
    yield process
    process.stop()


@pytest.fixture
def cli_env(dev_server: DevServer, tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in PROVIDER_VARIABLES}
    return {**env, "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(tmp_path / "cli-home")}


async def cli(env: dict[str, str], *args: str, exit_code: int = 0) -> str:
    ran = await asyncio.to_thread(run_starter, env, *args)
    assert ran.returncode == exit_code, (args, ran.returncode, ran.stdout, ran.stderr)
    return ran.stdout


async def status_of(client: Client, run: str) -> RunStatus | None:
    try:
        return await client.get_workflow_handle(run).query("status", result_type=RunStatus)
    except Exception:  # not started yet, or no worker has answered yet
        return None


async def until(client: Client, run: str, phase: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (status := await status_of(client, run)) is None or status.phase != phase:
        assert time.monotonic() < deadline, f"{run} never reached {phase}: {status}"
        await asyncio.sleep(0.2)


async def stop_mid_research(base: str) -> None:
    """DeerFlow's Stop: its request shape, read until the researcher speaks, then the connection closed."""
    body = {"messages": [{"role": "user", "content": QUESTION}], "thread_id": "cancel_stop", "locale": "en-US",
            "auto_accepted_plan": True, "enable_background_investigation": True, "max_plan_iterations": 1,
            "max_step_num": 3, "max_search_results": 3, "report_style": "academic", "enable_deep_thinking": False,
            "mcp_settings": {}, "resources": []}
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=120) as http, \
            http.stream("POST", f"{base}/api/chat/stream", content=json.dumps(body), headers=headers) as response:
        async for block in response.aiter_text():
            if any(data.get("agent") == "researcher" for _, data in parse_sse(block)):
                return
    raise AssertionError("the turn ended before the researcher spoke")


async def cancel_on_the_page(page: Page, base: str, run: str) -> None:
    await page.navigate(f"{base}/?run={run}")
    await page.wait_for("!document.getElementById('cancel-run').hidden", 30, what="the running run's Cancel")
    await page.press("#cancel-ask")
    await page.press("#cancel-yes")


async def ended(client: Client, run: str, timeout: float = 60) -> WorkflowExecutionStatus | None:
    handle = client.get_workflow_handle(run)
    deadline = time.monotonic() + timeout
    while (status := (await handle.describe()).status) == WorkflowExecutionStatus.RUNNING:
        assert time.monotonic() < deadline, f"{run} still runs"
        await asyncio.sleep(0.2)
    return status


async def test_a_run_cancelled_from_each_route_is_cancelled_in_every_view(
        dev_server: DevServer, client: Client, worker: WorkerProcess, model_server: FakeModelServer,
        cli_env: dict[str, str], page: Page) -> None:
    model_server.latency_seconds = 1.0  # conftest puts it back after the test
    settings = load_settings(environ={"DEERFLOW_WEB_TOKENS": json.dumps([{"name": "dora", "token": TOKEN,
                                                                          "role": "admin"}])})
    async with api_server(client, settings) as base, httpx.AsyncClient(timeout=60) as http:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        # Cancelled at its plan review: mid-research it raced its own end, since the other routes'
        # minutes beside busy loops were enough for it to finish first.
        started = await http.post(f"{base}/api/runs", json={"question": QUESTION}, headers=auth)
        assert started.status_code == 200, started.text
        page_run = started.json()["id"]
        for run, extra in (("cancel-cli", []), ("cancel-temporal", []), ("cancel-budget", ["--token-budget", "3000"])):
            await cli(cli_env, "run", QUESTION, "--auto-accept", "--no-wait", "--id", run, *extra)
        runs = {page_run: DORA, "cancel-cli": CAROL, STOP_RUN: DORA, "cancel-temporal": OUTSIDE,
                "cancel-budget": CAROL}

        await stop_mid_research(base)  # DeerFlow's Stop, mid-research
        await until(client, "cancel-temporal", "researching")
        assert dev_server.cli("workflow", "cancel", "--workflow-id", "cancel-temporal").returncode == 0
        await until(client, "cancel-cli", "researching")
        await cli(cli_env, "cancel", "cancel-cli", "--as", "carol")
        await until(client, "cancel-budget", "awaiting_budget")
        await cli(cli_env, "budget", "cancel-budget", "--cancel", "--as", "carol")
        await page.navigate(f"{base}/")
        await page.evaluate(f"sessionStorage.setItem('deerflow-token', {json.dumps(TOKEN)}); true")
        await until(client, page_run, "awaiting_review")
        await cancel_on_the_page(page, base, page_run)

        for run in runs:
            assert await ended(client, run) is WorkflowExecutionStatus.CANCELED, run
        await said_cancelled_by_the_cli(cli_env, runs)
        listed = (await http.get(f"{base}/api/runs", headers=auth)).json()["runs"]
        assert {entry["id"]: entry["status"] for entry in listed} == dict.fromkeys(runs, "canceled")
        await said_cancelled_on_the_page(page, base, runs)


async def said_cancelled_by_the_cli(env: dict[str, str], runs: dict[str, Actor]) -> None:
    rows = {line.split()[0]: line.split()[1] for line in (await cli(env, "list")).splitlines()[1:] if line.strip()}
    assert {run: rows.get(run) for run in runs} == dict.fromkeys(runs, "cancelled"), rows
    for run, by in runs.items():
        text = await cli(env, "status", run)
        assert text.splitlines()[0] == f"Run {run}: cancelled" and "Outcome: cancelled" in text, text
        shown = json.loads(await cli(env, "status", run, "--json"))
        assert shown["ended"] == "cancelled" and shown["error"] is None, shown
        decided = [(d["kind"], d["decision"], Actor.model_validate(d["by"])) for d in shown["decisions"]]
        assert decided == ([("budget", "cancel", by)] if run == "cancel-budget" else [("cancel", "cancel", by)])
        # It said "run completed" after a budget cancel; a watch of a run that did not complete exits 1.
        assert "run cancelled" in await cli(env, "watch", run, exit_code=1), run
    costs = await cli(env, "costs", "--since", "1h")
    ending = next(line for line in costs.splitlines() if line.startswith("cancelled"))
    assert ending.split()[1] == str(len(runs)), costs
    assert not any(line.startswith(("completed", "failed")) for line in costs.splitlines()), costs


WHY = {"cancel-budget": "Cancelled at its budget by carol (cli).", "cancel-temporal": f"Cancelled by {OUTSIDE}."}


async def said_cancelled_on_the_page(page: Page, base: str, runs: dict[str, Actor]) -> None:
    await page.navigate(f"{base}/")
    words = ("[...document.querySelectorAll('#runs li')].map((li) => [li.dataset.run, "
             "li.querySelector('.phase').textContent.split(' · ')[0]])")
    listed = await page.wait_for(f"{words}.length >= {len(runs)} && {words}", 30, what="the list")
    assert dict(listed) == dict.fromkeys(runs, "cancelled"), listed
    for run in runs:
        await page.navigate(f"{base}/?run={run}")
        said = await page.wait_for("document.getElementById('run-phase').textContent.startsWith('Ended:') && "
                                   "document.getElementById('run-phase').textContent", 30, what=f"{run}'s end")
        assert said == "Ended: cancelled", (run, said)
        # Who cancelled it, the same from the feed and the run's status (not the SDK's "Workflow cancelled").
        why = await page.wait_for("document.getElementById('run-error').textContent", what=f"{run}'s why")
        assert why == WHY.get(run, f"Cancelled by {runs[run]}."), (run, why)
        assert await page.evaluate("document.getElementById('cancel-run').hidden")
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / "cancelled-from-each-route.png")
