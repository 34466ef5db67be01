"""``/api/chat/stream`` and ``/api/config`` held to DeerFlow's contract (../shared/deerflow-web/API.md).

A dev server, a real worker process (offline model) and the API server on a free loopback port:
the SSE a DeerFlow UI would read, turn by turn (question, edit, accept), the interrupt, errors as
events, thread isolation, CORS and the doors; and the page feed's resume-by-offset.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from config.settings import Settings, load_settings
from runtime.embedded import has_worker
from server.chat import ChatStreamRequest
from server.security import RequestError, check_bind
from tests.support.processes import DevServer, WorkerProcess
from tests.support.web_server import api_server, parse_sse
from workflows.contracts.status import RunStatus

pytestmark = pytest.mark.timeout(120)

UI_ORIGIN = "http://ui.example:3000"
DEERFLOW_TYPES = {"message_chunk", "tool_calls", "tool_call_chunks", "tool_call_result", "interrupt", "citations",
                  "error"}
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
PREFIX = "deerflow-web-"


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
                 ) -> AsyncIterator[WorkerProcess]:
    process = WorkerProcess(dev_server.address, tmp_path_factory.mktemp("worker") / "worker.log").start()
    deadline = time.monotonic() + 60
    while not await has_worker(client):
        assert time.monotonic() < deadline, process.log_path.read_text()
        await asyncio.sleep(0.2)
    yield process
    process.stop()


def settings(**changes: object) -> Settings:
    return load_settings().model_copy(update={"web_allowed_origins": [UI_ORIGIN], "web_token": None, **changes})


@pytest.fixture(scope="module")
async def base(client: Client, worker: WorkerProcess) -> AsyncIterator[str]:
    async with api_server(client, settings()) as url:
        yield url


def turn(thread: str, text: str, **fields: object) -> dict:
    return {"messages": [{"role": "user", "content": text}], "thread_id": thread, "locale": "en-US",
            "auto_accepted_plan": False, "enable_background_investigation": True, "max_step_num": 3,
            "report_style": "academic", "resources": [], **fields}


@pytest.mark.parametrize("web", [True, False])
def test_deerflows_web_search_switch_reaches_the_request(web: bool) -> None:
    request = ChatStreamRequest.model_validate(turn("t", "q", enable_web_search=web)).research_request()
    assert request.enable_web_search is web


def test_a_mentioned_document_is_named_in_the_question_not_its_server_path() -> None:
    """DeerFlow's UI writes an @ mention into the text as [title](uri); the path stays out of the plan."""
    uri = "/srv/deerflow/.deerflow/resources/uploads/local/fleet-trial.md"
    body = turn("t", f"What does [fleet-trial.md]({uri}) say about sodium-ion cells?",
                resources=[{"uri": uri, "title": "fleet-trial.md"}])
    request = ChatStreamRequest.model_validate(body).research_request()
    assert request.question == "What does fleet-trial.md say about sodium-ion cells?"
    assert request.resources == [uri]


async def chat(base: str, body: object, **headers: str) -> list[tuple[str, dict]]:
    async with httpx.AsyncClient(timeout=90) as http:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await http.post(f"{base}/api/chat/stream", content=content,
                                   headers={"Content-Type": "application/json", **headers})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


def assert_deerflow_shapes(events: list[tuple[str, dict]], thread: str) -> None:
    for kind, data in events:
        assert kind in DEERFLOW_TYPES, kind
        assert data["thread_id"] == thread
        if kind in ("message_chunk", "tool_calls", "tool_call_result"):
            assert data["role"] == "assistant" and data["id"] and data["agent"]
        if kind == "tool_calls":
            assert isinstance(data["tool_call_chunks"], list)
            assert all(call["type"] == "tool_call" and call["name"] for call in data["tool_calls"])


async def status_of(client: Client, workflow_id: str) -> RunStatus:
    return await client.get_workflow_handle(workflow_id).query("status", result_type=RunStatus)


async def test_question_edit_accept_report_in_deerflow_order(base: str, client: Client) -> None:
    thread = "threadA_1"
    first = await chat(base, turn(thread, QUESTION))
    assert_deerflow_shapes(first, thread)
    kinds = [kind for kind, _ in first]
    # Coordinator hands off with a tool call, then the planner's plan, then the interrupt, and the turn ends.
    assert kinds[:2] == ["tool_calls", "message_chunk"]
    assert first[0][1]["agent"] == "coordinator" and first[0][1]["tool_calls"][0]["name"] == "handoff_to_planner"
    assert first[1][1]["finish_reason"] == "tool_calls"
    planner = [data for kind, data in first if kind == "message_chunk" and data["agent"] == "planner"]
    assert len(planner) == 1 and planner[0]["finish_reason"] == "stop"
    plan = json.loads(planner[0]["content"])
    assert plan["title"] and len(plan["steps"]) == 3
    kind, interrupt = first[-1]
    assert kind == "interrupt" and "agent" not in interrupt and interrupt["finish_reason"] == "interrupt"
    assert interrupt["id"].startswith("human_feedback:")
    assert [o["value"] for o in interrupt["options"]] == ["edit_plan", "accepted"]
    assert (await status_of(client, f"{PREFIX}{thread}.1")).awaiting == "plan_feedback"

    edited = await chat(base, turn(thread, "add a step on charging infrastructure", interrupt_feedback="edit_plan"))
    assert_deerflow_shapes(edited, thread)
    assert [kind for kind, _ in edited] == ["message_chunk", "interrupt"]
    assert edited[0][1]["agent"] == "planner" and edited[0][1]["id"] != planner[0]["id"]
    assert json.loads(edited[0][1]["content"])["steps"] != plan["steps"]  # (the title, the report's, stays)
    assert edited[1][1]["id"] != interrupt["id"]

    done = await chat(base, turn(thread, "Cool! Let's get started.", interrupt_feedback="accepted"))
    assert_deerflow_shapes(done, thread)
    agents = [data.get("agent") for kind, data in done if kind == "message_chunk"]
    assert agents[0] == "researcher" and agents[-1] == "reporter"
    searches = {data["tool_calls"][0]["id"]: data["id"] for kind, data in done
                if kind == "tool_calls" and data["tool_calls"][0]["name"] == "web_search"}
    results = [data for kind, data in done if kind == "tool_call_result"]
    assert searches and results
    first_result = next(r for r in results if r["tool_call_id"] in searches)
    pages = json.loads(first_result["content"])
    assert pages and all(p["type"] == "page" and p["url"].startswith("http") for p in pages)
    # A tool call's result follows the message that made it, and the report comes last, then citations.
    position = {id(data): i for i, (_, data) in enumerate(done)}
    call_message = next(i for i, (k, d) in enumerate(done) if k == "tool_calls"
                        and d["tool_calls"][0]["id"] == first_result["tool_call_id"])
    assert call_message < position[id(first_result)]
    kind, citations = done[-1]
    assert kind == "citations" and citations["citations"]
    assert {c["url"] for c in citations["citations"]} >= {p["url"] for p in pages}
    report = next(d for k, d in done if k == "message_chunk" and d.get("agent") == "reporter")
    assert report["finish_reason"] == "stop" and report["content"].startswith("#")

    # A new question on the same thread starts the thread's next run.
    again = await chat(base, turn(thread, "How do sodium-ion batteries compare?"))
    assert again[-1][0] == "interrupt"
    # Its messages are new messages in the same tab: no id of the first run is reused.
    earlier = {data.get("id") for _, data in first + edited + done}
    assert not earlier & {data.get("id") for _, data in again}
    assert (await status_of(client, f"{PREFIX}{thread}.2")).awaiting == "plan_feedback"


async def test_a_clarifying_question_ends_the_turn_and_the_next_message_answers_it(base: str) -> None:
    asked = await chat(base, turn("clarify", "heat pumps", enable_clarification=True))
    assert [kind for kind, _ in asked] == ["message_chunk"]
    assert asked[0][1]["agent"] == "coordinator" and asked[0][1]["content"].endswith("?")
    assert asked[0][1]["finish_reason"] == "stop"
    answered = await chat(base, turn("clarify", "technology and costs of home heat pumps in the EU over the next "
                                                "five years, for homeowners", enable_clarification=True))
    assert answered[0][0] == "tool_calls" and answered[0][1]["tool_calls"][0]["name"] == "handoff_to_planner"
    assert answered[-1][0] == "interrupt"


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "not JSON"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "thread_id"),
    (turn("../other", QUESTION), "thread_id must be"),
    (turn("x.1", QUESTION), "thread_id must be"),
    (turn("nobody-asked", "ok", interrupt_feedback="accepted"), "no research run"),
    (turn("t2", QUESTION, max_step_num=999), "max_step_num"),
    (b'{"thread_id": "t", "pad": "' + b"x" * 70_000 + b'"}', "over 65536 bytes"),
])
async def test_problems_arrive_as_error_events(base: str, body: object, message: str) -> None:
    events = await chat(base, body)
    assert len(events) == 1, events
    kind, data = events[0]
    assert kind == "error" and message in data["error"]


async def test_feedback_for_one_thread_never_reaches_another_threads_run(base: str, client: Client) -> None:
    waiting = await chat(base, turn("victim", QUESTION))
    assert waiting[-1][0] == "interrupt"
    before = await status_of(client, f"{PREFIX}victim.1")
    for other in ("attacker", "victim.1", "deerflow-web-victim", "victim_1"):
        events = await chat(base, turn(other, "x", interrupt_feedback="accepted"))
        assert [kind for kind, _ in events] == ["error"], other
    # Feedback the workflow refuses (not waiting for it) is an error too, and the run is unchanged.
    events = await chat(base, turn("victim", "x", interrupt_feedback="nonsense"))
    assert events[0][0] == "error" and "interrupt_feedback must be" in events[0][1]["error"]
    after = await status_of(client, f"{PREFIX}victim.1")
    assert after.awaiting == "plan_feedback" and after.plan_history == before.plan_history


async def test_a_resource_outside_the_roots_is_refused_as_an_error_event(base: str) -> None:
    events = await chat(base, turn("resources", QUESTION, resources=[{"uri": "/etc/passwd", "title": "x"}]))
    assert events[-1][0] == "error" and "resource roots" in events[-1][1]["error"]


async def test_a_delivered_turn_outlives_its_stream_and_chat_cancel_cancels_it(base: str, client: Client) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for bad in ([], {"thread_id": "../x"}, {"thread_id": "never-used"}):
            refused = await http.post(f"{base}/api/chat/cancel", json=bad)
            assert refused.status_code == 400, refused.text
    # The plan delivered for review, the page is closed: the run waits (tests/test_api_chat_stop.py: a
    # stream left mid-turn, DeerFlow's Stop, cancels its run).
    assert (await chat(base, turn("leaver", QUESTION)))[-1][0] == "interrupt"
    await asyncio.sleep(1)
    assert (await status_of(client, f"{PREFIX}leaver.1")).awaiting == "plan_feedback"
    async with httpx.AsyncClient(timeout=30) as http:
        cancelled = await http.post(f"{base}/api/chat/cancel", json={"thread_id": "leaver"})
    assert cancelled.status_code == 200, cancelled.text
    described = await client.get_workflow_handle(f"{PREFIX}leaver.1").describe()
    deadline = time.monotonic() + 30
    while described.status is None or described.status.name == "RUNNING":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.3)
        described = await client.get_workflow_handle(f"{PREFIX}leaver.1").describe()
    assert described.status.name == "CANCELED"


async def test_config_and_resources(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        config = (await http.get(f"{base}/api/config")).json()
        resources = (await http.get(f"{base}/api/rag/resources", params={"query": "x"})).json()
    assert set(config) >= {"rag", "models"}
    assert "provider" in config["rag"] and isinstance(config["models"]["basic"], list)
    assert isinstance(config["models"]["reasoning"], list)
    assert isinstance(resources["resources"], list)


async def test_cors_answers_only_configured_origins(base: str) -> None:
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type,cache-control"}
    async with httpx.AsyncClient(timeout=30) as http:
        allowed = await http.options(f"{base}/api/chat/stream", headers={"Origin": UI_ORIGIN, **preflight})
        refused = await http.options(f"{base}/api/chat/stream", headers={"Origin": "http://evil.example", **preflight})
        config = await http.get(f"{base}/api/config", headers={"Origin": UI_ORIGIN})
        posted = await http.post(f"{base}/api/runs", json={"question": "q"}, headers={"Origin": "http://evil.example"})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == UI_ORIGIN
    assert "access-control-allow-origin" not in refused.headers
    assert config.headers["access-control-allow-origin"] == UI_ORIGIN
    assert posted.status_code == 403  # a page elsewhere cannot start runs, even with a simple request


async def started(client: Client, workflow_id: str, timeout: float = 60) -> None:
    """Until the server knows the run ``workflow_id`` (a stopped worker does not hold its start)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.get_workflow_handle(workflow_id).describe()
            return
        except RPCError:
            assert time.monotonic() < deadline, f"{workflow_id} never started"
            await asyncio.sleep(0.1)


async def test_open_streams_are_bounded(client: Client, worker: WorkerProcess) -> None:
    """The worker is stopped (SIGSTOP) while the first stream is open, so its turn cannot reach the
    plan and end the stream before the second request: on an idle machine the offline model's turn
    took less time than the second request did, and the stream's place was free again."""
    assert worker.process is not None
    # Runs outlive their streams here: the first is left mid-turn.
    async with api_server(client, settings(web_max_streams=1, web_cancel_on_disconnect=False)) as url, \
            httpx.AsyncClient(timeout=60) as http:
        os.killpg(worker.process.pid, signal.SIGSTOP)
        try:
            # The server counts a stream from its headers; its run is started once the stream is read.
            async with http.stream("POST", f"{url}/api/chat/stream", json=turn("bounded", QUESTION)):
                await started(client, f"{PREFIX}bounded.1")
                refused = parse_sse((await http.post(f"{url}/api/chat/stream",
                                                     json=turn("bounded2", QUESTION))).text)
                assert refused == [("error", {"thread_id": "bounded2",
                                              "error": "the server has 1 streams open, its limit; try again later"})]
        finally:
            os.killpg(worker.process.pid, signal.SIGCONT)
        await asyncio.sleep(0.5)  # the closed stream gave its place back
        again = await chat(url, turn("bounded", "x", interrupt_feedback="accepted"))
        assert again[-1][0] == "citations", again[-3:]


async def test_token_and_host_header(client: Client) -> None:
    with pytest.raises(RequestError, match="DEERFLOW_WEB_TOKEN"):
        check_bind("0.0.0.0", False)
    check_bind("0.0.0.0", True)
    check_bind("::1", False)
    async with api_server(client, settings(web_token="s3cret")) as url, httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{url}/api/config")).status_code == 401
        assert (await http.get(f"{url}/api/config", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await http.get(f"{url}/api/config", headers={"Authorization": "Bearer s3cret"})).status_code == 200
        assert (await http.get(f"{url}/")).status_code == 200  # the page itself holds no data
    async with api_server(client, settings()) as url, httpx.AsyncClient(timeout=30) as http:
        rebound = await http.get(f"{url}/api/config", headers={"Host": "attacker.example:8000"})
        assert rebound.status_code == 403


async def test_page_feed_resumes_from_any_offset_with_no_duplicate_or_gap(base: str, client: Client) -> None:
    events = await chat(base, turn("feed", QUESTION, auto_accepted_plan=True))
    assert events[-1][0] == "citations"
    run = f"{PREFIX}feed.1"

    async def feed(url: str, after: str | None = None) -> list[tuple[str, str]]:
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.get(f"{url}/api/runs/{run}/events", params={"after": after} if after else {})
        blocks = [dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
                  for block in response.text.split("\n\n") if block.strip()]
        return [(b.get("id", ""), b["event"]) for b in blocks]

    whole = await feed(base)
    assert whole[-1][1] == "end" and whole[-2][1] == "done"
    ids = [item_id for item_id, _ in whole[:-1]]
    assert len(set(ids)) == len(ids)
    for cut in (0, len(ids) // 2, len(ids) - 1):
        assert [i for i, _ in (await feed(base, ids[cut]))[:-1]] == ids[cut + 1:]
    async with api_server(client, settings()) as restarted:  # a new server process reads the same feed
        assert await feed(restarted, ids[3]) == whole[4:]
    async with httpx.AsyncClient(timeout=30) as http:
        shown = (await http.get(f"{base}/api/runs/{run}")).json()
    assert shown["status"] == "completed" and shown["result"]["report"].startswith("#")
    assert shown["run"]["phase"] == "completed" and shown["run"]["usage"]["llm_calls"] > 0


async def test_page_api_refuses_other_workflow_types_and_bad_reviews(base: str, client: Client,
                                                                     dev_server: DevServer) -> None:
    started = dev_server.cli("workflow", "start", "--type", "SomethingElse", "--task-queue", "elsewhere",
                             "--workflow-id", "not-research")
    assert started.returncode == 0, started.stderr
    async with httpx.AsyncClient(timeout=30) as http:
        for path in ("/api/runs/not-research", "/api/runs/not-research/events"):
            assert (await http.get(f"{base}{path}")).status_code == 404
        assert (await http.post(f"{base}/api/runs/not-research/cancel", json={})).status_code == 404
        started = await http.post(f"{base}/api/runs", json={"question": QUESTION})
        run = started.json()["id"]
        both = await http.post(f"{base}/api/runs/{run}/review", json={"accept": True, "edit": "x"})
        assert both.status_code == 400
        extra = await http.post(f"{base}/api/runs", json={"question": "q", "mcp_settings": {"servers": {}}})
        assert extra.status_code == 400 and "mcp_settings" in extra.json()["detail"]
    await client.get_workflow_handle("not-research").terminate("test")
    await client.get_workflow_handle(run).terminate("test")


def test_static_vendor_files_keep_their_licence_headers() -> None:
    vendor = Path(__file__).resolve().parent.parent / "server" / "static" / "vendor"
    assert "MIT Licensed" in (vendor / "marked.min.js").read_text()[:300]
    assert "@license DOMPurify" in (vendor / "purify.min.js").read_text()[:300]


async def test_run_list_puts_runs_awaiting_review_first_and_the_page_api_reviews(base: str, client: Client) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        done = await chat(base, turn("listed-done", QUESTION, auto_accepted_plan=True))
        assert done[-1][0] == "citations"
        run = (await http.post(f"{base}/api/runs", json={"question": QUESTION})).json()["id"]
        deadline = time.monotonic() + 60
        while (await status_of(client, run)).awaiting != "plan_feedback":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.3)
        runs = (await http.get(f"{base}/api/runs")).json()["runs"]
        waiting = [r["awaiting"] == "plan_feedback" for r in runs]
        assert waiting == sorted(waiting, reverse=True) and run in [r["id"] for r in runs if r["awaiting"]]
        assert any(r["id"] == f"{PREFIX}listed-done.1" and r["status"] == "completed" for r in runs)
        # Each run is listed with its question, from the page and from DeerFlow's chat alike.
        assert {r["question"] for r in runs if r["id"] in (run, f"{PREFIX}listed-done.1")} == {QUESTION}
        too_many = await http.post(f"{base}/api/runs", json={"question": QUESTION, "max_step_num": 999})
        assert too_many.status_code == 400 and "max_step_num" in too_many.json()["detail"]
        edited = await http.post(f"{base}/api/runs/{run}/review", json={"edit": "add a step on costs"})
        assert edited.status_code == 200 and edited.json()["accepted"] is False and edited.json()["message"]
        while len((await status_of(client, run)).plan_history) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.3)
        not_waiting = await http.post(f"{base}/api/runs/{run}/answer", json={"answer": "EU"})
        assert not_waiting.status_code == 400 and "not waiting" in not_waiting.json()["detail"]
    await client.get_workflow_handle(run).terminate("test")
