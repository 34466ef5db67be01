"""The content flows' endpoints over HTTP, in DeerFlow's request and response shapes.

The real API server on loopback, the session's worker (time-skipping server, real activities,
the offline model), a fake OpenAI-compatible speech server on loopback, and the MCP test server
as the operator's. Token previews reach the API server's hub as in production (the worker posts
them to ``/internal/token-stream``), so the prose stream is the model's tokens as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pptx import Presentation
from temporalio.client import Client

import server.content
import server.security
from config.mcp_servers import MCPServerConfig
from config.settings import Settings
from offline.content_agents import prose_writer
from offline.model_faults import Fault
from offline.model_server import FakeModelServer
from tests.support.fake_http import FakeHTTPServer, fake_speech
from tests.support.processes import free_port
from tests.support.runs import SAMPLE_REPORT
from tests.support.web_server import api_server
from tests.support.workers import WorkerWith
from workflows.contracts.podcast import NO_VOICE_MESSAGE
from workflows.contracts.slides import PPTX_MEDIA_TYPE

pytestmark = pytest.mark.timeout(90)
TOKEN = "content-stream-token-0123456789ab"
MCP_SCRIPT = str(Path(__file__).parent / "support" / "mcp_test_server.py")
CAP = 64 * 1024
METRICS = {"word_count", "citation_count", "unique_sources", "image_count", "section_count",
           "section_coverage_score", "sections_found", "sections_missing", "has_title", "has_key_points",
           "has_overview", "has_citations_section"}


@pytest.fixture(scope="module")
def tts() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer(fake_speech) as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_tts(tts: FakeHTTPServer) -> None:
    tts.requests.clear()


def server_settings(worker_settings: Settings) -> Settings:
    """The API server's settings: no login, the previews' token, the content cap, one MCP server."""
    calc = MCPServerConfig(transport="stdio", command=sys.executable, args=[MCP_SCRIPT])
    return worker_settings.model_copy(update={
        "web_token": None, "token_stream_token": TOKEN, "web_max_content_bytes": CAP, "mcp_servers": {"calc": calc}})


@contextlib.asynccontextmanager
async def serving(worker_with: WorkerWith, settings: Settings,
                  worker_settings: Callable[[str], Settings]) -> AsyncIterator[tuple[str, Client]]:
    """The API server with ``settings``, and a worker of its own with ``worker_settings(server_url)``;
    yields the server's URL and the client it starts runs with."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with worker_with(worker_settings(url)) as client, api_server(client, settings, port=port):
        yield url, client


@pytest.fixture(scope="module")
async def served(worker_with: WorkerWith, worker_settings: Settings,
                 tts: FakeHTTPServer) -> AsyncIterator[tuple[str, Client]]:
    """The API server, and its worker's settings: previews to it, the fake voice, one MCP server."""
    settings = server_settings(worker_settings)
    # The previews' sends may take their longest: under a loaded suite, one over the default 0.5 s
    # ended the preview (a slow sink's own case is tests/test_token_stream.py's).
    async with serving(worker_with, settings, lambda url: settings.model_copy(update={
            "token_stream_url": f"{url}/internal/token-stream", "token_stream_timeout": 10.0,
            "tts_url": f"{tts.base_url}/v1", "tts_api_key": "tts-key-0123456789"})) as served:
        yield served


@pytest.fixture
def base(served: tuple[str, Client]) -> str:
    return served[0]


async def post(base: str, path: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(f"{base}{path}", json=body)


def deerflow_sse(text: str) -> list[tuple[str, str | None]]:
    """Events as DeerFlow's ``fetchStream`` parses them: blocks on a blank line, lines on "\\n",
    ``key: value`` with the space, the last data line kept."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event, data = "message", None
        for line in block.split("\n"):
            key, sep, value = line.partition(": ")
            if not sep:
                continue
            if key == "event":
                event = value
            elif key == "data":
                data = value
        events.append((event, data))
    return events


# ---------------------------------------------------------------- evaluation


async def test_evaluation_answers_deerflows_shape(base: str, model_server: FakeModelServer) -> None:
    response = await post(base, "/api/report/evaluate", {"content": SAMPLE_REPORT, "query": "tidal power",
                                                          "report_style": "news", "use_llm": False})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer["metrics"]) == METRICS and (answer["score"], answer["grade"]) == (5.92, "C")
    assert answer["llm_evaluation"] is None and model_server.requests_for("report_judge") == []
    judged = (await post(base, "/api/report/evaluate", {"content": SAMPLE_REPORT, "query": "tidal power",
                                                         "report_style": "news", "use_llm": True})).json()
    assert set(judged["llm_evaluation"]["scores"]) == {"factual_accuracy", "completeness", "coherence", "relevance",
                                                       "citation_quality", "writing_quality"}
    assert judged["summary"].startswith(f"Report Grade: {judged['grade']}") and judged["score"] != 5.92


@pytest.mark.parametrize(("path", "body", "problem"), [
    ("/api/report/evaluate", {"content": "x" * (CAP + 10), "query": "q"}, "over the operator's cap"),
    ("/api/report/evaluate", {"content": 42, "query": "q"}, "content"),
    ("/api/report/evaluate", {"content": "# t", "query": "q", "use_llm": "yes"}, "use_llm"),
    ("/api/report/evaluate", ["not", "an", "object"], "dictionary"),
    ("/api/prose/generate", {"prompt": "text", "option": "summarise"}, "option"),
    ("/api/prose/generate", {"prompt": "text", "option": "zap"}, "zap needs a command"),
    ("/api/prose/generate", {"prompt": "", "option": "fix"}, "prompt"),
    ("/api/ppt/generate", {"content": ["a"]}, "content"),
    ("/api/ppt/generate", {"content": "# t", "locale": "../../etc"}, "locale"),
    ("/api/podcast/generate", {"content": "x" * (CAP + 10)}, "over the operator's cap"),
    ("/api/podcast/generate", {}, "content"),
    ("/api/tts", {"text": "hi", "encoding": "ogg"}, "encoding"),
    ("/api/mcp/server/metadata", {"name": "calc", "transport": "carrier-pigeon"}, "transport"),
])
async def test_bad_input_is_a_400_and_starts_nothing(served: tuple[str, Client], monkeypatch: pytest.MonkeyPatch,
                                                     path: str, body: object, problem: str) -> None:
    base, client = served
    started: list[object] = []

    async def start_workflow(*args: object, **kwargs: object) -> None:
        started.append(args)

    monkeypatch.setattr(client, "start_workflow", start_workflow)
    response = await post(base, path, body)
    assert response.status_code == 400 and problem in response.json()["detail"], response.text
    assert started == []


# ---------------------------------------------------------------- request text off the event loop (issue #42 §1)

OFF_THE_LOOP = {  # route, body, the function that works on the request's text (module, name)
    "prose": ("/api/prose/generate", {"prompt": "<mark>Tides</mark>", "option": "improve"},
              (server.content, "prose_request")),
    "evaluation": ("/api/report/evaluate", {"content": SAMPLE_REPORT, "report_style": "news"},
                   (server.security, "parsed_body")),
}


@pytest.mark.parametrize("route", list(OFF_THE_LOOP))
async def test_the_server_works_on_a_requests_text_off_its_event_loop(
        base: str, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    """The work is held until another request was answered: on the event loop, nothing else could be
    (the evaluation's "[" x 120,000 and prose's "<mark " x 60,000 made every other client wait)."""
    path, body, (module, name) = OFF_THE_LOOP[route]
    work, started, answered, held = getattr(module, name), threading.Event(), threading.Event(), []

    def held_work(*args: object) -> object:
        started.set()
        held.append(answered.wait(30))
        return work(*args)

    monkeypatch.setattr(module, name, held_work)
    async with httpx.AsyncClient(timeout=90) as http:
        request = asyncio.create_task(http.post(f"{base}{path}", json=body))
        assert await asyncio.to_thread(started.wait, 30)
        other = await http.get(f"{base}/api/config")
        answered.set()
        response = await request
    assert other.status_code == 200 and held == [True]
    assert response.status_code == 200, response.text


# ---------------------------------------------------------------- prose


async def test_prose_streams_the_models_tokens_as_deerflows_editor_reads_them(
        base: str, model_server: FakeModelServer) -> None:
    prompt = " ".join(f"Tide gauges at site {n} show the water rising twice a day." for n in range(8))
    model_server.piece_seconds = 0.05
    try:
        async with httpx.AsyncClient(timeout=60) as http, http.stream(
                "POST", f"{base}/api/prose/generate", json={"prompt": prompt, "option": "longer", "command": ""},
        ) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            text = "".join([chunk async for chunk in response.aiter_text()])
    finally:
        model_server.piece_seconds = 0.0
    events = deerflow_sse(text)
    assert len(events) >= 4 and all(event == "message" and data for event, data in events)  # token by token
    # Line breaks travel as "\r" (DeerFlow's parser would cut an event at "\n"); nothing lost or doubled.
    expected = prose_writer("Task: longer", f"Text:\n{prompt}").replace("\n", "\r")
    assert "".join(data or "" for _, data in events) == expected and "\r\r" in expected


# A report's Markdown as DeerFlow's editor serialises a selection of several blocks.
MARKDOWN = ("## Key Points\n\n- tides rise twice a day.   they are predictable.\n- the Moon, and the Sun, pull "
            "the water.\n\n1. first, the gauges.\n2. then the models.\n\n> quoted, as it was.\n\n"
            "## Overview\nTidal power is steady. It is also costly.")


@pytest.mark.parametrize("option", ["improve", "shorter", "fix"])
async def test_multi_line_markdown_keeps_every_line_break_through_the_stream(
        base: str, model_server: FakeModelServer, option: str) -> None:
    model_server.piece_seconds = 0.01
    try:
        response = await post(base, "/api/prose/generate", {"prompt": MARKDOWN, "option": option, "command": ""})
    finally:
        model_server.piece_seconds = 0.0
    assert response.status_code == 200, response.text
    events = deerflow_sse(response.text)
    assert all(event == "message" for event, _ in events)
    text = "".join(data or "" for _, data in events).replace("\r", "\n")  # as our page and Markdown read it
    assert text == prose_writer(f"Task: {option}", f"Text:\n{MARKDOWN}")
    assert text.count("\n") == MARKDOWN.count("\n") and "\n\n## Overview\n" in text
    assert [line[:2] for line in text.split("\n")] == [line[:2] for line in MARKDOWN.split("\n")]


async def test_a_failed_ask_ai_is_a_non_200_with_its_reason_as_deerflow_answers(
        base: str, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.status(401, "Incorrect API key provided", agent="prose_writer"))
    response = await post(base, "/api/prose/generate", {"prompt": MARKDOWN, "option": "improve", "command": ""})
    assert response.status_code == 502 and response.headers["content-type"] == "application/json", response.text
    assert "prose writer failed" in response.json()["detail"] and "event:" not in response.text


async def test_a_prose_run_that_fails_mid_answer_breaks_the_stream_off(
        base: str, model_server: FakeModelServer) -> None:
    """Text was sent, so the status is 200: the body ends unfinished, which DeerFlow's reader (and
    ours) take as a failure, instead of an error event read as more of the answer."""
    model_server.piece_seconds = 0.05
    model_server.inject(Fault("truncated", agent="prose_writer"), Fault.status(401, agent="prose_writer"))
    received = ""
    try:
        async with httpx.AsyncClient(timeout=60) as http, http.stream(
                "POST", f"{base}/api/prose/generate",
                json={"prompt": MARKDOWN * 3, "option": "improve", "command": ""}) as response:
            assert response.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                async for chunk in response.aiter_text():
                    received += chunk
    finally:
        model_server.piece_seconds = 0.0
        model_server.clear_faults()
    assert received.startswith("data: ") and "event: error" not in received


SELECTION = "Tides rise twice a day, and they are predictable from the Moon's position."
# What DeerFlow's editor sends for Ask AI on a selected list item: its highlight serialised with it.
HIGHLIGHTED = f'- <mark data-color="#c1ecf970" style="background-color: #c1ecf970; color: inherit">{SELECTION}</mark>'


async def test_ask_ai_on_a_selection_reaches_the_model_without_the_editors_highlight(
        base: str, model_server: FakeModelServer) -> None:
    response = await post(base, "/api/prose/generate", {"prompt": HIGHLIGHTED, "option": "improve", "command": ""})
    assert response.status_code == 200, response.text
    [sent] = model_server.requests_for("prose_writer")[-1:]
    assert f"- {SELECTION}" in sent["messages"][-1]["content"] and "mark" not in sent["messages"][-1]["content"]
    assert "<mark" not in "".join(data or "" for _, data in deerflow_sse(response.text))
    only_marks = await post(base, "/api/prose/generate", {"prompt": "<mark></mark>", "option": "fix", "command": ""})
    assert only_marks.status_code == 400 and "prompt" in only_marks.json()["detail"]


async def test_the_stream_stays_open_until_deerflows_editor_has_taken_the_last_text(base: str) -> None:
    """DeerFlow's editor shows the last event twice if the stream ends within 16 ms of it."""
    arrivals: list[float] = []
    async with httpx.AsyncClient(timeout=60) as http, http.stream(
            "POST", f"{base}/api/prose/generate", json={"prompt": SELECTION, "option": "continue", "command": ""},
    ) as response:
        async for chunk in response.aiter_raw():
            if chunk.strip():
                arrivals.append(time.monotonic())
        ended = time.monotonic()
    assert arrivals and ended - arrivals[-1] >= 0.1


# ---------------------------------------------------------------- slides and podcast


async def test_ppt_generate_returns_the_deck(base: str) -> None:
    response = await post(base, "/api/ppt/generate", {"content": SAMPLE_REPORT, "locale": "en-US"})
    assert response.status_code == 200 and response.headers["content-type"] == PPTX_MEDIA_TYPE, response.text
    deck = Presentation(io.BytesIO(response.content))
    assert [slide.shapes.title.text for slide in deck.slides][:2] == ["Tidal power in 2030", "Key Points"]


async def test_podcast_is_the_joined_mp3_of_both_voices(base: str, tts: FakeHTTPServer) -> None:
    response = await post(base, "/api/podcast/generate", {"content": SAMPLE_REPORT})
    assert response.status_code == 200 and response.headers["content-type"] == "audio/mp3", response.text
    assert response.content.startswith(b"[onyx:Hello Deer! ][nova:Glad to be h]")
    assert len(tts.requests) == response.content.count(b"[")
    assert {seen.headers["authorization"] for seen in tts.requests} == {"Bearer tts-key-0123456789"}


async def test_tts_reads_the_text(base: str, tts: FakeHTTPServer) -> None:
    response = await post(base, "/api/tts", {"text": "Hello there, deer", "encoding": "mp3", "speed_ratio": 1.0})
    assert response.status_code == 200 and response.content == b"[onyx:Hello there,]", response.text


async def test_without_a_voice_the_ui_is_told_and_gets_the_script(
        worker_settings: Settings, worker_with: WorkerWith) -> None:
    async with serving(worker_with, server_settings(worker_settings), lambda _: worker_settings) as (base, _):  # no TTS
        response = await post(base, "/api/podcast/generate", {"content": SAMPLE_REPORT})
        spoken = await post(base, "/api/tts", {"text": "hello"})
    assert response.status_code == 503 and response.json()["detail"] == NO_VOICE_MESSAGE
    assert response.json()["script"]["lines"][0]["speaker"] == "male"
    assert spoken.status_code == 503 and NO_VOICE_MESSAGE in spoken.json()["detail"]


# ---------------------------------------------------------------- MCP check


async def test_an_operator_server_is_listed_in_deerflows_shape(base: str) -> None:
    response = await post(base, "/api/mcp/server/metadata", {
        "name": "calc", "transport": "stdio", "command": sys.executable, "args": [MCP_SCRIPT], "env": {}})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["transport"], answer["command"], answer["args"]) == ("stdio", sys.executable, [MCP_SCRIPT])
    add = next(tool for tool in answer["tools"] if tool["name"] == "add")
    assert add["inputSchema"]["properties"].keys() == {"a", "b"} and add["description"]


@pytest.mark.parametrize("body", [
    {"name": "evil", "transport": "stdio", "command": "touch", "args": ["{marker}"]},
    {"name": "calc", "transport": "stdio", "command": "touch", "args": ["{marker}"]},
    {"name": "calc", "transport": "stdio", "args": ["{marker}"]},
    {"name": "calc", "transport": "sse", "url": "http://127.0.0.2:9/sse"},
    {"transport": "stdio", "command": "touch", "args": ["{marker}"]},
])
async def test_a_server_the_request_defines_is_refused_and_never_started(base: str, tmp_path: Path,
                                                                       body: dict, caplog: pytest.LogCaptureFixture
                                                                       ) -> None:
    marker = tmp_path / "started"
    body = json.loads(json.dumps(body).replace("{marker}", str(marker)))
    response = await post(base, "/api/mcp/server/metadata", body)
    assert response.status_code == 403 and "operator configured" in response.json()["detail"], response.text
    assert not marker.exists()
    # DeerFlow's dialog shows only "Failed to add server: NAME" (its client reads response.ok alone):
    # the operator's log says why (#49 §1).
    reason = response.json()["detail"].rsplit(": ", 1)[-1].rstrip(".")
    assert f"MCP server check refused {body.get('name', '')!r}: {reason}" in caplog.messages
