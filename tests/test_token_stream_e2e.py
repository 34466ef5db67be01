"""Token previews end to end: a real worker process streams a run's model turns to the API server,
and a page following the run sees them before the durable final messages, which supersede them; and
a run watched so does what it would do unwatched (issue #42, item 8).

The dev server, ``worker.py`` on the session's fake model (paced, so previews are visible) and the
API server (in this process, or ``starter.py serve``) on free loopback ports.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from offline.model_server import FakeModelServer, Fault
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.token_stream_format import ANNOUNCEMENT
from server.threads import workflow_id
from tests.support.history_checks import tool_batches
from tests.support.processes import DevServer, ServeProcess, WorkerProcess, free_port, run_starter, start_worker
from tests.support.runs import run_id
from tests.support.web_server import api_server, parse_sse
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult

pytestmark = pytest.mark.timeout(120)
PER_TURN = 16  # DEERFLOW_MAX_TOOL_CALLS_PER_TURN's default
TOKEN = "stream-token-for-e2e-0123456789ab"
QUESTION = "How do heat pumps work?"
PREFIX = "deerflow-web-"
THREAD = "token-stream-e2e"


@pytest.fixture
async def base(client: Client) -> AsyncIterator[str]:
    settings = load_settings().model_copy(update={"web_token": None, "token_stream_token": TOKEN})
    async with api_server(client, settings) as url:
        yield url


async def worker(dev_server: DevServer, client: Client, tmp_path: Path, model: FakeModelServer,
                 search: FakeSearchServer, sink: str) -> WorkerProcess:
    # The worker shares the client's home (so its blob store): the page decodes the run's payloads.
    return await start_worker(dev_server, client, tmp_path / "worker.log", **offline_env(model, search),
                              DEERFLOW_TOKEN_STREAM_URL=sink,
                              DEERFLOW_TOKEN_STREAM_TOKEN=TOKEN)


async def read(http: httpx.AsyncClient, method: str, url: str, **kwargs: object) -> list[tuple[str, dict]]:
    text = ""
    async with http.stream(method, url, **kwargs) as response:  # type: ignore[arg-type]
        async for chunk in response.aiter_text():
            text += chunk
    return parse_sse(text)


async def follow(base: str) -> tuple[str, list[tuple[str, dict]], list[tuple[str, dict]]]:
    """One run, asked as DeerFlow's UI asks (``/api/chat/stream``) and followed at the same time
    as our page follows it (``/api/runs/ID/events``): both streams, to the run's end."""
    run = workflow_id(PREFIX, THREAD, 1)
    async with httpx.AsyncClient(timeout=90) as http:
        turn = {"messages": [{"role": "user", "content": QUESTION}], "thread_id": THREAD,
                "auto_accepted_plan": True, "max_step_num": 1, "enable_background_investigation": False}
        deerflow = asyncio.create_task(read(http, "POST", f"{base}/api/chat/stream", json=turn))
        while (await http.get(f"{base}/api/runs/{run}")).status_code != 200:
            await asyncio.sleep(0.05)
        page = await read(http, "GET", f"{base}/api/runs/{run}/events")
        return run, page, await deerflow


async def test_previews_come_first_and_a_retried_attempt_is_a_new_message(
        dev_server: DevServer, client: Client, base: str, model_server: FakeModelServer,
        search_server: FakeSearchServer, tmp_path: Path) -> None:
    model_server.piece_seconds = 0.03
    model_server.inject(Fault.truncated(agent="reporter"))  # the reporter's first attempt hangs up midway
    process = await worker(dev_server, client, tmp_path, model_server, search_server, f"{base}/internal/token-stream")
    try:
        run, events, deerflow = await follow(base)
    finally:
        process.stop()
        model_server.piece_seconds = 0.0
    previews = [(i, data) for i, (kind, data) in enumerate(events) if data.get("preview")]
    finals = {data["stream_id"]: (i, data) for i, (kind, data) in enumerate(events)
              if kind == "message_chunk" and "stream_id" in data}
    [(at, report)] = [(i, data) for i, data in finals.values() if data["agent"] == "reporter"]
    assert report["stream_id"].startswith(f"{run}/live.") and report["stream_id"].endswith(".2")
    shown = {sid: "".join(d["content"] for _, d in previews if d["id"] == sid)
             for sid in {d["id"] for _, d in previews}}
    assert shown[report["stream_id"]] == report["content"], "the retried attempt previewed the whole report"
    assert all(i < at for i, d in previews if d["id"] == report["stream_id"]), "previews come before the final"
    first = report["stream_id"][:-1] + "1"
    assert first in shown and report["content"].startswith(shown[first]) and shown[first] != report["content"], \
        "the cut attempt streamed part of the report under its own id"
    assert all(d["agent"] and d["role"] == "assistant" for _, d in previews)
    assert "done" in [kind for kind, _ in events] and "error" not in [kind for kind, _ in events]

    # DeerFlow's UI joins message_chunk contents by id: the final message continues its preview,
    # so every turn reads exactly once, under its preview's id; the cut attempt stays its own message.
    joined: dict[str, str] = {}
    for kind, data in deerflow:
        if kind == "message_chunk":
            joined[data["id"]] = joined.get(data["id"], "") + data.get("content", "")
    assert joined[report["stream_id"]] == report["content"] and report["id"] not in joined, "the report twice"
    assert joined[first] == shown[first]


@pytest.mark.timeout(300)
async def test_a_run_watched_by_a_page_calls_the_same_tools_and_replays(
        dev_server: DevServer, model_server: FakeModelServer, search_server: FakeSearchServer, tmp_path: Path) -> None:
    """``starter.py serve`` announces its sink in the home it shares with a real worker, which finds it
    and streams every turn: the researcher's flood of 2,000 calls is still capped at the per-turn cap, its
    broken arguments are still answered as not JSON, and the run replays with nothing nondeterministic."""
    home = tmp_path / "home"
    environ = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(home)}
    client = await connect_when_ready(dev_server.address, data_converter=data_converter(load_settings(environ)))
    process = await start_worker(dev_server, client, tmp_path / "worker.log", DEERFLOW_HOME=str(home),
                                 **offline_env(model_server, search_server))
    serve = ServeProcess(dev_server.address, free_port(), tmp_path / "serve.log", home)
    try:
        while not (home / ANNOUNCEMENT).exists():
            await asyncio.sleep(0.05)
        model_server.inject(Fault.tool_call_flood(2_000, agent="researcher"),
                            Fault.invalid_tool_args(agent="researcher"))
        handle = await client.start_workflow(
            WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1),
            id=run_id("watched"), task_queue=TASK_QUEUE, result_type=ResearchResult)
        result = await asyncio.wait_for(handle.result(), 240)
    finally:
        serve.kill()
        process.stop()
    assert result.outcome is Outcome.REPORT and not model_server.pending_faults
    turns = model_server.requests_for("researcher")
    assert turns and all(turn.get("stream") for turn in turns), "the worker did not preview its turns"
    told = [message["content"] for message in turns[2]["messages"] if message["role"] == "tool"]
    assert "not valid JSON" in told[-1] and "unterminated" in told[-1]
    assert max(tool_batches(await handle.fetch_history())) == PER_TURN
    replayed = run_starter(environ, "replay", handle.id)
    assert replayed.returncode == 0 and "Replay OK" in replayed.stdout, replayed.stdout + replayed.stderr
