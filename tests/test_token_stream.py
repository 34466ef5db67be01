"""Token previews from the ``chat`` activity: what reaches the sink, and what the sink cannot do to the call.

The real ChatOpenAI streams from the fake model; the sink is a scriptable loopback server.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ssl
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
import uvicorn
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.guards.secret_scrubber import SecretScrubber
from activities.model.llm import ModelActivities
from activities.model.token_stream import Publisher
from config.settings import Settings, load_settings
from offline.model_server import FakeModelServer, Fault
from runtime.token_stream_format import ANNOUNCEMENT, PATH, Delta, Sink, announce, configured_sink
from server import serve
from server.app import create_app
from server.feed import FeedItem
from server.live import Previews, TokenHub
from tests.support.chat_requests import COORDINATOR
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.processes import free_port
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse
from workflows.contracts.research import Outcome

TOKEN = "stream-token-for-tests-0123456789"
REPORTER = ChatRequest(prompt="reporter", prompt_vars={"CURRENT_TIME": "now", "locale": "en-US",
                                                       "report_style": "academic"},
                       messages=[ChatMessage(role="user", content="# Research Requirements\n\nHow do tides work?")])


@pytest.fixture
def sink() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer(lambda seen: Reply(204)) as server:
        yield server


def streaming(provider_env: dict[str, str], url: str, **overrides: str) -> Settings:
    return settings_with(provider_env, DEERFLOW_TOKEN_STREAM_URL=url, DEERFLOW_TOKEN_STREAM_TOKEN=TOKEN, **overrides)


async def chat(settings: Settings, request: ChatRequest = REPORTER, attempt: int = 1) -> ChatResponse:
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, attempt=attempt, activity_id="7",
                                           workflow_id="wf-1", workflow_run_id="run-1")
    return await environment.run(ModelActivities(settings).chat, request)


def deltas(server: FakeHTTPServer) -> list[dict]:
    return [delta for seen in server.requests for delta in seen.json()["deltas"]]


async def settled(server: FakeHTTPServer, text: str, timeout: float = 5) -> None:
    """Until the sink holds ``text`` (the last sends finish after the activity returned)."""
    deadline = time.monotonic() + timeout
    while "".join(d["text"] for d in deltas(server)) != text:
        assert time.monotonic() < deadline, deltas(server)
        await asyncio.sleep(0.02)


async def test_the_reply_streams_to_the_sink_as_a_prefix_chain(
        provider_env: dict[str, str], model_server: FakeModelServer, sink: FakeHTTPServer) -> None:
    model_server.piece_seconds = 0.05  # a model generating at a visible pace
    try:
        response = await chat(streaming(provider_env, f"{sink.base_url}/internal/token-stream"), attempt=3)
    finally:
        model_server.piece_seconds = 0.0
    assert response.finish_reason == "stop" and response.usage.total_tokens > 0
    assert model_server.requests[-1]["stream"] is True
    await settled(sink, response.message.content)
    sent = deltas(sink)
    assert len(sent) > 1, "one request per reply is no preview"
    offset = 0
    for delta in sent:
        assert delta["offset"] == offset and delta["attempt"] == 3 and delta["activity_id"] == "7"
        assert (delta["workflow_id"], delta["run_id"], delta["agent"]) == ("wf-1", "run-1", "reporter")
        offset += len(delta["text"])
    assert {seen.headers["authorization"] for seen in sink.requests} == {f"Bearer {TOKEN}"}


async def test_a_preview_loads_no_ca_bundle(provider_env: dict[str, str], model_server: FakeModelServer,
                                            sink: FakeHTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the CA bundle is about 28 ms of CPU on the worker's event loop: a preview, made for every
    model call a page watches, must share the process's context instead of building its own."""
    settings = streaming(provider_env, f"{sink.base_url}/internal/token-stream")
    first = await chat(settings)  # the process's first call builds what it keeps
    await settled(sink, first.message.content)
    loads: list[object] = []
    load_verify_locations = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations",
                        lambda context, *args, **kwargs: loads.append(args or kwargs)
                        or load_verify_locations(context, *args, **kwargs))
    sink.requests.clear()
    second = await chat(settings, attempt=2)
    await settled(sink, second.message.content)
    assert loads == []


async def test_without_a_sink_the_call_does_not_stream(provider_env: dict[str, str], model_server: FakeModelServer,
                                                       tmp_path: Path) -> None:
    response = await chat(settings_with(provider_env, DEERFLOW_HOME=str(tmp_path)))
    assert response.message.content and not model_server.requests[-1].get("stream")


async def test_streamed_turns_keep_tool_calls_and_truncation(
        provider_env: dict[str, str], model_server: FakeModelServer, sink: FakeHTTPServer) -> None:
    settings = streaming(provider_env, sink.base_url)
    model_server.inject(Fault.invalid_tool_args(arguments="[1, 2]"), Fault.loop())
    invalid = await chat(settings, COORDINATOR)
    assert invalid.message.tool_calls[0].invalid_arguments == "[1, 2]"
    looped = await chat(settings)
    assert looped.truncated and looped.finish_reason == "length"


@pytest.mark.parametrize("where", ["down", "slow", "refusing"])
async def test_a_sink_down_slow_or_refusing_costs_the_call_nothing(
        provider_env: dict[str, str], model_server: FakeModelServer, sink: FakeHTTPServer, where: str) -> None:
    url = f"http://127.0.0.2:{free_port()}/internal/token-stream" if where == "down" else sink.base_url
    sink.inject(*[Reply(204, delay=5.0) if where == "slow" else Reply(500)] * 50)
    started = time.monotonic()
    # The sink may take 3 s per send: a call that waited for it would take that long.
    response = await chat(streaming(provider_env, url, DEERFLOW_TOKEN_STREAM_TIMEOUT="3"))
    assert response.message.content and time.monotonic() - started < 2.0
    if where != "down":
        await asyncio.sleep(0.3)
        assert len(sink.requests) == 1, "a failed send ends that reply's preview"


async def test_a_secret_in_the_reply_is_never_published(sink: FakeHTTPServer, provider_env: dict[str, str]) -> None:
    secret = "sk-live-0123456789abcdef"
    publisher = Publisher(Sink(url=sink.base_url, token=TOKEN), {"workflow_id": "w"}, SecretScrubber([secret]),
                          settings_with(provider_env))
    for piece in ["The key is sk-live-01", "23456789ab", "cdef and more text"]:
        publisher.add(piece)
    publisher.finish(complete=True)
    await publisher.task
    published = "".join(d["text"] for d in deltas(sink))
    assert published == "The key is "[:len(published)] and "sk-live" not in published


async def test_a_run_with_its_sink_down_completes(provider_env: dict[str, str], worker_with: WorkerWith) -> None:
    async with worker_with(streaming(provider_env, f"http://127.0.0.2:{free_port()}/internal/token-stream")) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=1)
        result = await handle.result()
    assert result.outcome is Outcome.REPORT and result.report


def test_the_local_serve_announces_the_sink_to_the_embedded_worker(tmp_path: Path) -> None:
    settings = Settings(DEERFLOW_HOME=tmp_path)
    assert configured_sink(settings) is None
    path = announce(tmp_path, "http://127.0.0.1:8000/internal/token-stream", TOKEN)
    assert path.name == ANNOUNCEMENT and path.stat().st_mode & 0o077 == 0
    assert configured_sink(settings) == Sink(url="http://127.0.0.1:8000/internal/token-stream", token=TOKEN)
    assert configured_sink(settings.model_copy(update={"token_stream": False})) is None
    operator = settings.model_copy(update={"token_stream_url": "http://api.internal:8000/x",
                                           "token_stream_token": TOKEN})
    assert configured_sink(operator) == Sink(url="http://api.internal:8000/x", token=TOKEN)


def _delta(text: str, offset: int, attempt: int = 1) -> Delta:
    return Delta(workflow_id="wf", run_id="r", activity_id="5", attempt=attempt, agent="reporter",
                 offset=offset, text=text)


def test_previews_show_a_prefix_and_the_final_message_continues_it() -> None:
    previews = Previews("t")
    first = previews.preview(_delta("Hello ", 0))
    assert first is not None and first["id"] == "wf/live.r.5.1" and first["preview"] is True
    assert previews.preview(_delta("world", 6)) is not None
    retried = previews.preview(_delta("Hel", 0, attempt=2))
    assert retried is not None and retried["id"] == "wf/live.r.5.2", "a retried attempt is another message"
    final = FeedItem((0, 9, 0), "message_chunk", {"id": "wf/0.9", "stream_id": "wf/live.r.5.1",
                                                  "content": "Hello world!", "finish_reason": "stop"})
    rest = previews.continuation(final)
    assert (rest.data["id"], rest.data["content"]) == ("wf/live.r.5.1", "!")
    assert previews.preview(_delta("late", 11)) is None, "nothing after the final message"


def test_a_gap_ends_the_preview_and_the_final_message_stands_alone() -> None:
    previews = Previews("t")
    previews.preview(_delta("Hello ", 0))
    assert previews.preview(_delta("lost", 10)) is None
    assert previews.preview(_delta("world", 6)) is None
    final = FeedItem((0, 9, 0), "message_chunk", {"id": "wf/0.9", "stream_id": "wf/live.r.5.1", "content": "Hi"})
    assert previews.continuation(final).data["id"] == "wf/0.9"


async def test_the_sink_endpoint_takes_only_the_shared_token_and_bounded_bodies(provider_env: dict[str, str]) -> None:
    settings = settings_with(provider_env, DEERFLOW_TOKEN_STREAM_TOKEN=TOKEN, DEERFLOW_WEB_MAX_BODY_BYTES="4096")
    hub = TokenHub(settings)
    app = create_app(cast(Client, None), settings, hub=hub)  # the sink needs no Temporal
    delta = {"workflow_id": "wf", "run_id": "r", "activity_id": "1", "attempt": 1, "agent": "reporter",
             "offset": 0, "text": "Hello"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        def post(body: object, token: str | None = TOKEN) -> Awaitable[httpx.Response]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return http.post(PATH, json=body, headers=headers)

        with hub.subscribe("wf") as queue:
            assert (await post({"deltas": [delta]}, token=None)).status_code == 401
            assert (await post({"deltas": [delta]}, token=TOKEN + "x")).status_code == 401
            assert (await post({"deltas": [delta | {"text": "x" * 5000}]})).status_code == 413
            assert (await post({"deltas": [delta | {"attempt": 0}]})).status_code == 400
            assert queue.empty()
            assert (await post({"deltas": [delta]})).status_code == 204
            assert queue.get_nowait().text == "Hello"


async def test_a_sink_that_falls_behind_ends_the_preview(sink: FakeHTTPServer, provider_env: dict[str, str]) -> None:
    sink.inject(Reply(204, delay=1.0))
    settings = settings_with(provider_env, DEERFLOW_TOKEN_STREAM_MAX_PENDING="1024", DEERFLOW_TOKEN_STREAM_TIMEOUT="2")
    publisher = Publisher(Sink(url=sink.base_url, token=TOKEN), {"workflow_id": "w"}, SecretScrubber([]), settings)
    publisher.add("first piece")
    while not sink.requests:  # the first send is under way, and slow
        await asyncio.sleep(0.01)
    for _ in range(30):
        publisher.add("y" * 64)
    assert publisher.stopped, "past the operator's pending limit, the rest is not previewed"
    publisher.finish(complete=True)
    await publisher.task
    assert "".join(d["text"] for d in deltas(sink)) == "first piece"


async def test_serve_announces_its_sink_while_it_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEERFLOW_HOME", str(tmp_path))
    announced: list[Sink | None] = []

    async def no_temporal(_settings: Settings) -> Client:
        return cast(Client, None)

    async def serving(server: uvicorn.Server) -> None:
        announced.append(configured_sink(load_settings()))

    monkeypatch.setattr(serve, "connect", no_temporal)
    monkeypatch.setattr(uvicorn.Server, "serve", serving)
    assert await serve.serve(argparse.Namespace(host="127.0.0.1", port=8123), load_settings()) == 0
    [sink] = announced
    assert sink is not None and sink.url == "http://127.0.0.1:8123/internal/token-stream"
    assert not (tmp_path / ANNOUNCEMENT).exists(), "withdrawn when the server stops"
