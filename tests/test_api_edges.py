"""The API server's edges (issue #19, item 7), on ``starter.py serve`` as its own process.

What a client can send that is not a normal request: JSON nested 30,000 deep, an upload named in
100 CJK characters, a body it never finishes, and a thread that has outlived its 100th run. Each
is answered as a client error, logged in one line at most, and never a 500 or a traceback.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from starlette.routing import Route
from temporalio.client import Client, WorkflowExecutionStatus

from config.settings import load_settings
from server.app import create_app
from server.security import MAX_JSON_DEPTH
from tests.support.processes import DevServer, ServeProcess, WorkerProcess, free_port, start_worker
from tests.support.runs import STARTED
from tests.support.web_server import parse_sse
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE
from workflows.contracts.status import RunStatus

pytestmark = pytest.mark.timeout(180)

PREFIX = "deerflow-web-"  # the default DEERFLOW_WEB_THREAD_PREFIX
TOKEN = "token-stream-test-token"
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"


@dataclass
class Served:
    url: str
    log: Path
    uploads: Path

    def log_since(self, offset: int) -> str:
        return self.log.read_bytes()[offset:].decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's log, home (shared with the worker: the blob store) and resource root."""
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, folder: Path) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, folder / "worker.log", DEERFLOW_HOME=str(folder / "home"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def served(dev_server: DevServer, worker: WorkerProcess, folder: Path) -> Iterator[Served]:
    """``starter.py serve`` on the test's dev server; with a worker polling already, it starts none."""
    resources = folder / "resources"
    resources.mkdir()
    port = free_port()
    server = ServeProcess(dev_server.address, port, folder / "serve.log", folder / "home",
                          env={"DEERFLOW_RESOURCE_ROOTS": str(resources), "DEERFLOW_TOKEN_STREAM_TOKEN": TOKEN})
    # Its start-up lines may land just after the port opens; the tests read only what follows them.
    deadline = time.monotonic() + 30
    while b"Uvicorn running" not in (folder / "serve.log").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "API holders: no token: callers on loopback only" in (folder / "serve.log").read_text()
    yield Served(f"http://127.0.0.1:{port}", folder / "serve.log", resources / "uploads" / "local")  # no tokens
    server.kill()


# ---------------------------------------------------------------- JSON nested past the parser's limit

# The API's routes that take a JSON body, by path; every POST route must be here or in NOT_JSON.
JSON_ENDPOINTS = ("/api/chat/stream", "/api/chat/cancel", "/api/prompt/enhance", "/api/runs",
                  "/api/runs/{run:str}/review", "/api/runs/{run:str}/answer", "/api/runs/{run:str}/budget",
                  "/api/runs/review-all", "/api/runs/cancel-all", "/api/runs/{run:str}/fork",
                  "/internal/token-stream",
                  "/api/report/evaluate", "/api/prose/generate", "/api/ppt/generate", "/api/podcast/generate",
                  "/api/tts", "/api/mcp/server/metadata")
NOT_JSON = ("/api/rag/upload", "/api/runs/{run:str}/cancel")  # a multipart form; no body


def test_every_post_route_is_classified(client: Client) -> None:
    app = create_app(client, load_settings())
    posts = {route.path for route in app.routes if isinstance(route, Route) and "POST" in (route.methods or ())}
    assert posts == {*JSON_ENDPOINTS, *NOT_JSON}


async def post(served: Served, path: str, body: bytes) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(served.url + path.replace("{run:str}", "no-such-run"), content=body,
                               headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})


# 30,000 levels (60,000 bytes: under the 64 KiB body cap) is past the parser's recursion limit; one
# level past the server's own limit is well within it.
@pytest.mark.parametrize("depth", [30_000, MAX_JSON_DEPTH + 1])
@pytest.mark.parametrize("path", JSON_ENDPOINTS)
async def test_json_nested_too_deep_is_a_client_error(served: Served, path: str, depth: int) -> None:
    offset = served.log.stat().st_size
    response = await post(served, path, b"[" * depth + b"]" * depth)
    if path == "/api/chat/stream":  # DeerFlow's UI reads every problem from a 200 stream
        assert response.status_code == 200, response.text
        [(kind, data)] = parse_sse(response.text)
        detail = data["error"]
        assert kind == "error"
    else:
        assert response.status_code == 400, response.text
        detail = response.json()["detail"]
    assert detail == f"request body is nested deeper than {MAX_JSON_DEPTH} levels"
    assert served.log_since(offset) == ""


async def test_json_as_deep_as_allowed_is_read(served: Served) -> None:
    depth = MAX_JSON_DEPTH
    response = await post(served, "/api/runs", b"[" * depth + b"]" * depth)
    # Read and parsed; then refused for what it is, not for how deep it is.
    assert response.status_code == 400 and "Input should be" in response.json()["detail"], response.text


# ---------------------------------------------------------------- file names longer in bytes than in characters


async def upload(served: Served, name: str, content: bytes) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{served.url}/api/rag/upload", files={"file": (name, content, "text/markdown")})


# Three, two, one and four UTF-8 bytes a character (the last: CJK Extension B).
@pytest.mark.parametrize("name", ["研" * 100 + ".md", "é" * 200 + ".txt", "a" * 400 + ".md", "𠜎" * 80 + ".md"],
                         ids=["cjk", "latin", "ascii", "cjk-ext-b"])
async def test_a_long_name_is_cut_to_what_the_file_system_takes(served: Served, name: str) -> None:
    offset = served.log.stat().st_size
    stored = []
    for copy in range(3):  # the copies' "-2", "-3" fit too
        response = await upload(served, name, f"copy {copy}".encode())
        assert response.status_code == 200, response.text
        stored.append(served.uploads.parent.parent / response.json()["description"])  # below the root
    stem, suffix = os.path.splitext(name)
    first = stored[0].name.removesuffix(suffix)
    assert [path.name for path in stored] == [f"{first}{suffix}", f"{first}-2{suffix}", f"{first}-3{suffix}"]
    assert [path.parent for path in stored] == [served.uploads] * 3
    assert [path.read_text() for path in stored] == ["copy 0", "copy 1", "copy 2"]
    # Cut to the byte: room left for the suffix and the largest copy number ("-999"), and no more.
    assert stem.startswith(first) and 255 - 3 < len(f"{first}-999{suffix}".encode()) <= 255
    assert served.log_since(offset) == ""


# ---------------------------------------------------------------- clients that hang up mid-body

DROPS = 24


def send_half_a_body(url: str, path: str, content_type: str) -> None:
    """A request that announces 10,000 bytes, sends 100, and hangs up."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
                           "Content-Length: 10000\r\n\r\n".encode() + b"x" * 100)
        time.sleep(0.05)


async def test_a_client_that_hangs_up_mid_body_is_one_line_in_the_log(served: Served) -> None:
    offset = served.log.stat().st_size
    paths = [("/api/runs", "application/json"), ("/api/chat/stream", "application/json"),
             ("/api/rag/upload", "multipart/form-data; boundary=x")]
    await asyncio.gather(*(asyncio.to_thread(send_half_a_body, served.url, *paths[n % len(paths)])
                           for n in range(DROPS)))
    deadline = time.monotonic() + 30
    # Each drop shows up in the log in some form: our line, or an unhandled exception's traceback.
    while (log := served.log_since(offset)).count("closed the connection") + log.count("Exception in ASGI") < DROPS:
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.2)
    async with httpx.AsyncClient(timeout=30) as http:  # the server still answers
        assert (await http.get(f"{served.url}/api/config")).status_code == 200
    lines = served.log_since(offset).splitlines()
    assert len(lines) == DROPS, "\n".join(lines)
    assert all("closed the connection in the middle of its POST /api/" in line for line in lines), lines


# ---------------------------------------------------------------- a thread past its 100th run


async def chat(served: Served, body: dict) -> list[tuple[str, dict]]:
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(f"{served.url}/api/chat/stream", json=body)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def turn(thread: str, text: str, **fields: object) -> dict:
    return {"messages": [{"role": "user", "content": text}], "thread_id": thread, "auto_accepted_plan": False,
            "max_step_num": 3, **fields}


async def test_a_thread_keeps_working_past_its_100th_run(served: Served, client: Client,
                                                         worker: WorkerProcess) -> None:
    thread = f"long-{uuid.uuid4().hex[:8]}"
    # Runs .1 to .100, as a thread that has asked 100 questions has: each ended at once (a bad input).
    limit = asyncio.Semaphore(8)

    async def earlier(number: int) -> None:
        async with limit:
            await client.start_workflow(WORKFLOW_TYPE, {}, id=f"{PREFIX}{thread}.{number}", task_queue=TASK_QUEUE)
    await asyncio.gather(*(earlier(number) for number in range(1, 101)))
    previous, newest = (client.get_workflow_handle(f"{PREFIX}{thread}.{number}") for number in (101, 102))
    STARTED.extend([previous, newest])

    first = await chat(served, turn(thread, QUESTION))
    second = await chat(served, turn(thread, "How do sodium-ion batteries compare?"))
    assert first[-1][0] == second[-1][0] == "interrupt", (first[-1], second[-1])
    assert (await newest.query("status", result_type=RunStatus)).awaiting == "plan_feedback"

    # Feedback and cancel go to the newest run, .102, and to nothing else.
    edited = await chat(served, turn(thread, "add a step on charging infrastructure", interrupt_feedback="edit_plan"))
    assert edited[-1][0] == "interrupt" and "error" not in {kind for kind, _ in edited}, edited
    assert len((await newest.query("status", result_type=RunStatus)).plan_history) == 2
    assert len((await previous.query("status", result_type=RunStatus)).plan_history) == 1
    async with httpx.AsyncClient(timeout=30) as http:
        cancelled = await http.post(f"{served.url}/api/chat/cancel", json={"thread_id": thread})
    assert cancelled.json() == {"cancelled": f"{PREFIX}{thread}.102"}, cancelled.text
    deadline = time.monotonic() + 30
    while (await newest.describe()).status is WorkflowExecutionStatus.RUNNING:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.3)
    assert (await newest.describe()).status is WorkflowExecutionStatus.CANCELED
    assert (await previous.describe()).status is WorkflowExecutionStatus.RUNNING
