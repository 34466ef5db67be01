"""DeerFlow's Stop on ``/api/chat/stream`` (issue #49): its UI aborts the stream's request, and as
DeerFlow stops its graph when its client goes away, a run whose client leaves mid-turn is cancelled,
in the name of the token's holder. Not a run whose turn was delivered (a plan for review), not one
whose stream the API server itself drops as it shuts down, not one the holder may not cancel, and
none when the operator keeps runs going (``DEERFLOW_WEB_CANCEL_ON_DISCONNECT=false``).

A dev server, a real worker process on the session's fake model (each reply held a moment, so a run
is still working when its client leaves) and the API server with named tokens; the client sends
DeerFlow's request shape and leaves by closing its connection, as the browser's abort does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from config.settings import Settings, load_settings
from offline.model_server import FakeModelServer
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from tests.support.processes import DevServer, WorkerProcess, start_worker
from tests.support.web_server import api_server, parse_sse
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.status import RunStatus

pytestmark = pytest.mark.timeout(240)

TOKENS = {"dora": "dora-token-0123456789", "rita": "rita-token-0123456789"}
ROLES = {"rita": "reviewer"}
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
PREFIX = "deerflow-web-"
REPLY_SECONDS = 0.5  # each model reply: a run of about twenty calls works for ten seconds


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, model_server: FakeModelServer,
                 search_server: FakeSearchServer, tmp_path_factory: pytest.TempPathFactory,
                 ) -> AsyncIterator[WorkerProcess]:
    folder: Path = tmp_path_factory.mktemp("stop")
    process = await start_worker(dev_server, client, folder / "worker.log",
                                 **offline_env(model_server, search_server))
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def slow_model(model_server: FakeModelServer) -> None:
    model_server.latency_seconds = REPLY_SECONDS  # conftest puts it back after the test


def settings(**changes: object) -> Settings:
    named = [{"name": name, "token": token, **({"role": ROLES[name]} if name in ROLES else {})}
             for name, token in TOKENS.items()]
    return load_settings(environ={"DEERFLOW_WEB_TOKENS": json.dumps(named)}).model_copy(update=changes)


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}", "Content-Type": "application/json"}


def turn(thread: str, text: str, **fields: object) -> dict:
    """DeerFlow's request body, as its UI sends it."""
    return {"messages": [{"role": "user", "content": text}], "thread_id": thread, "locale": "en-US",
            "auto_accepted_plan": False, "enable_background_investigation": True, "max_plan_iterations": 1,
            "max_step_num": 3, "max_search_results": 3, "report_style": "academic", "enable_deep_thinking": False,
            "mcp_settings": {}, "resources": [], **fields}


async def leave_when(base: str, body: dict, who: str, seen: Callable[[str, dict], bool]) -> list[str]:
    """Stream a turn until an event ``seen`` holds of, then close the connection (DeerFlow's Stop:
    the browser aborts the request); the kinds of the events read."""
    kinds: list[str] = []
    async with httpx.AsyncClient(timeout=90) as http, \
            http.stream("POST", f"{base}/api/chat/stream", content=json.dumps(body), headers=as_(who)) as response:
        assert response.status_code == 200
        block = ""
        async for line in response.aiter_lines():
            block += line + "\n"
            if line:
                continue
            for kind, data in parse_sse(block):
                kinds.append(kind)
                if seen(kind, data):
                    return kinds
            block = ""
    raise AssertionError(f"the turn ended before the moment to leave; events: {kinds}")


async def whole_turn(base: str, body: dict, who: str) -> list[tuple[str, dict]]:
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(f"{base}/api/chat/stream", content=json.dumps(body), headers=as_(who))
    assert response.status_code == 200
    return parse_sse(response.text)


def researching(kind: str, data: dict) -> bool:
    return data.get("agent") == "researcher"


async def ended(client: Client, workflow_id: str, timeout: float = 120) -> WorkflowExecutionStatus:
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + timeout
    while (status := (await handle.describe()).status) == WorkflowExecutionStatus.RUNNING:
        assert time.monotonic() < deadline, f"{workflow_id} still runs after {timeout:.0f} s"
        await asyncio.sleep(0.2)
    assert status is not None
    return status


async def status_of(client: Client, workflow_id: str) -> RunStatus:
    return await client.get_workflow_handle(workflow_id).query("status", result_type=RunStatus)


async def test_stop_mid_research_cancels_the_run_in_the_holders_name(
        client: Client, worker: WorkerProcess, model_server: FakeModelServer) -> None:
    async with api_server(client, settings()) as base:
        kinds = await leave_when(base, turn("stop_1", QUESTION, auto_accepted_plan=True), "dora", researching)
        assert "tool_calls" in kinds  # the coordinator's handoff came first: the run had begun
        run = f"{PREFIX}stop_1.1"
        assert await ended(client, run, timeout=30) is WorkflowExecutionStatus.CANCELED
    status = await status_of(client, run)
    assert [(d.kind, d.by) for d in status.decisions] == [("cancel", Actor(name="dora", via=Via.API))]
    assert status.error is None and not any(step.state == "done" for step in status.steps[1:])
    calls = len(model_server.requests)
    await asyncio.sleep(3 * REPLY_SECONDS)  # a run that went on would have made its next call by now
    assert len(model_server.requests) == calls


async def test_leaving_after_the_plan_was_delivered_keeps_the_run(client: Client, worker: WorkerProcess) -> None:
    async with api_server(client, settings()) as base:
        first = await whole_turn(base, turn("stop_2", QUESTION), "dora")
        assert first[-1][0] == "interrupt"  # the plan for review: the turn was delivered, and the client leaves
        await asyncio.sleep(2)
        accepted = await whole_turn(base, turn("stop_2", "Looks good", interrupt_feedback="accepted"), "dora")
        assert not [data for kind, data in accepted if kind == "error"], accepted
        assert await ended(client, f"{PREFIX}stop_2.1") is WorkflowExecutionStatus.COMPLETED


async def test_the_operator_may_keep_runs_going_when_their_client_leaves(client: Client,
                                                                        worker: WorkerProcess) -> None:
    async with api_server(client, settings(web_cancel_on_disconnect=False)) as base:
        await leave_when(base, turn("stop_3", QUESTION, auto_accepted_plan=True), "dora", researching)
        assert await ended(client, f"{PREFIX}stop_3.1") is WorkflowExecutionStatus.COMPLETED


async def test_a_server_shutting_down_does_not_cancel_the_runs_it_streams(client: Client,
                                                                         worker: WorkerProcess) -> None:
    leaving: asyncio.Task[list[str]] | None = None
    async with api_server(client, settings()) as base:
        leaving = asyncio.create_task(whole_turn(base, turn("stop_4", QUESTION, auto_accepted_plan=True), "dora"))
        handle = client.get_workflow_handle(f"{PREFIX}stop_4.1")
        for _ in range(300):  # mid-research, with the client still reading
            with_steps = await _researching(handle)
            if with_steps:
                break
            await asyncio.sleep(0.1)
        assert not leaving.done()
    # the server stopped (its 2 s grace, then its streams were cancelled) with the client still there
    with pytest.raises(httpx.HTTPError):
        await leaving
    assert await ended(client, f"{PREFIX}stop_4.1") is WorkflowExecutionStatus.COMPLETED


async def _researching(handle: object) -> bool:
    try:
        status = await handle.query("status", result_type=RunStatus)  # type: ignore[attr-defined]
    except Exception:  # not started yet
        return False
    return status.phase == "researching"


async def test_a_reviewer_who_leaves_anothers_run_does_not_cancel_it(client: Client, worker: WorkerProcess) -> None:
    async with api_server(client, settings()) as base:
        first = await whole_turn(base, turn("stop_5", QUESTION), "dora")
        assert first[-1][0] == "interrupt"
        # rita reviews dora's plan (a reviewer may) and leaves while the research runs (she may not cancel it)
        await leave_when(base, turn("stop_5", "Looks good", interrupt_feedback="accepted"), "rita", researching)
        assert await ended(client, f"{PREFIX}stop_5.1") is WorkflowExecutionStatus.COMPLETED
