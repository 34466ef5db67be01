"""The content flows survive their worker, end to end with real processes (issue #25).

The dev server, ``starter.py serve`` and real ``worker.py`` processes at a low concurrency (one
model call and one speech line at a time), on this process's fakes: the model, the search and an
OpenAI-compatible voice whose "audio" names the voice and the line it read, so the joined MP3
shows the order of its clips and any clip twice. Each test starts a flow through its API endpoint,
as DeerFlow's UI does, holds one call of it open at a fake (a line's speech, the composer's, the
judge's, or the prose writer's stream) and, while it is held, kills the worker (SIGKILL, as a
crash) or stops it (SIGTERM, as a deploy), and starts a new one at once. The request that started
the flow stays open across it and must answer exactly what an undisturbed run of the same flow
answered: the same MP3, the same slides, the same evaluation, the same prose, nothing twice. A
killed call is made once more; after SIGTERM the call in flight finishes where it ran, so nothing
is asked twice. Several flows started at once on the one slow worker all finish too.

Time: a replacement worker polls 3-15 s after its launch on a loaded 2-core machine; the slot
(tests/support/crash_drill.py) hands each test's replacement to the next.
"""

from __future__ import annotations

import asyncio
import io
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pptx import Presentation
from temporalio.client import Client

from offline.model_server import FakeModelServer, Fault
from offline.search_server import FakeSearchServer
from runtime.token_stream_format import ANNOUNCEMENT
from tests.support.crash_drill import WorkerSlot, wait_until
from tests.support.fake_http import FakeHTTPServer, Reply, Seen, fake_speech
from tests.support.history_checks import retry_causes
from tests.support.processes import DevServer, ServeProcess, exit_code, free_port
from tests.support.runs import SAMPLE_REPORT, listed

pytestmark = pytest.mark.timeout(240)
HELD_SECONDS = 30.0  # a call the worker is killed in: far longer than the kill takes to land
DRAINED_SECONDS = 3.0  # a call the worker is stopped in: it finishes there, well inside the grace
WAIT_SECONDS = 150.0  # the answer: a new worker's start-up and first model call on a loaded machine included
PROMPT = " ".join(f"Tide gauges at site {n} show the water rising twice a day." for n in range(6))


# ---------------------------------------------------------------- the fake voice


class HeldVoice:
    """``fake_speech``, except that the request numbered ``hold_at`` (from the last :meth:`hold`) is
    answered only after ``seconds``, or once released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.hold_at = 0
        self.seconds = 0.0
        self.holding = threading.Event()
        self.release = threading.Event()

    def hold(self, at: int, seconds: float) -> None:
        with self.lock:
            self.count, self.hold_at, self.seconds = 0, at, seconds
        self.holding.clear()
        self.release.clear()

    def __call__(self, seen: Seen) -> Reply:
        with self.lock:
            self.count += 1
            held = self.count == self.hold_at
        if held:
            self.holding.set()
            self.release.wait(self.seconds)
        return fake_speech(seen)


@dataclass
class Fakes:
    model: FakeModelServer
    voice: HeldVoice
    voice_server: FakeHTTPServer

    def lines_spoken(self) -> Counter[str]:
        return Counter(seen.json()["input"] for seen in self.voice_server.requests)

    def let_go(self) -> None:
        """Drop every hold, so a retry (or the dead worker's request) is not held too."""
        self.model.clear_faults()
        self.model.piece_seconds = self.model.latency_seconds = 0.0
        self.voice.release.set()


# ---------------------------------------------------------------- the flows


def sse_text(body: bytes) -> str:
    """The text DeerFlow's editor shows: each event's data line, joined."""
    events = [block for block in body.decode().split("\n\n") if block.strip()]
    assert all(block.startswith("data: ") for block in events), events
    return "".join(block.removeprefix("data: ") for block in events)


def deck_text(body: bytes) -> list[list[str]]:
    """Every slide's text as python-pptx reads it: titles, bullets and each table cell."""
    deck = Presentation(io.BytesIO(body))
    slides = []
    for slide in deck.slides:
        texts = []
        for shape in slide.shapes:
            if shape.has_text_frame:
                texts.append(shape.text_frame.text)
            if shape.has_table:
                texts += [cell.text for row in shape.table.rows for cell in row.cells]
        slides.append(texts)
    assert slides and all(slides), "an empty deck or slide"
    return slides


@dataclass(frozen=True)
class Flow:
    """One content flow as a test drives it: its request, the call held open in it, and its answer."""

    name: str
    path: str
    body: dict[str, Any]
    agent: str | None  # the model call held open (None: a speech line, or the prose stream's pace)
    answer: Callable[[httpx.Response], object]  # what must equal the undisturbed run's
    media_type: str

    def hold(self, fakes: Fakes, seconds: float) -> None:
        if self.name == "podcast":
            fakes.voice.hold(3, seconds)  # the third line: the first has been spoken alone, the second after it
        elif self.name == "prose":
            fakes.model.piece_seconds = seconds / 16  # the answer comes in 17 pieces
        else:
            fakes.model.inject(Fault.timeout(seconds, agent=self.agent))

    def held(self, fakes: Fakes, exchange: Exchange) -> bool:
        if self.name == "podcast":
            return fakes.voice.holding.is_set()
        if self.name == "prose":
            return bool(exchange.chunks)  # the editor shows the first tokens
        return len(fakes.model.requests_for(self.agent or "")) == 1


FLOWS = [
    Flow("podcast", "/api/podcast/generate", {"content": SAMPLE_REPORT}, None, lambda r: r.content, "audio/mp3"),
    Flow("slides", "/api/ppt/generate", {"content": SAMPLE_REPORT, "locale": "en-US"}, "presentation_composer",
         lambda r: deck_text(r.content), "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    Flow("prose", "/api/prose/generate", {"prompt": PROMPT, "option": "longer", "command": ""}, "prose_writer",
         lambda r: sse_text(r.content), "text/event-stream"),
    Flow("evaluation", "/api/report/evaluate", {"content": SAMPLE_REPORT, "query": "tidal power",
                                                "report_style": "news", "use_llm": True}, "report_judge",
         lambda r: r.json(), "application/json"),
]

FLOW = {flow.name: flow for flow in FLOWS}


@dataclass
class Exchange:
    """One request to the API server, its body read as it arrives (``chunks``)."""

    url: str
    flow: Flow
    chunks: list[bytes] = field(default_factory=list)

    async def run(self) -> httpx.Response:
        async with httpx.AsyncClient(timeout=WAIT_SECONDS) as http, \
                http.stream("POST", f"{self.url}{self.flow.path}", json=self.flow.body) as response:
            async for chunk in response.aiter_raw():
                if chunk.strip():
                    self.chunks.append(chunk)
        return httpx.Response(response.status_code, headers=response.headers, content=b"".join(self.chunks))

    def answer(self, response: httpx.Response) -> object:
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith(self.flow.media_type)
        return self.flow.answer(response)


# ---------------------------------------------------------------- servers and workers


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Logs, and the home the API server and the workers share: the blob store and the announcement."""
    return tmp_path_factory.mktemp("content")


@pytest.fixture(scope="module")
def fakes(model_server: FakeModelServer) -> Iterator[Fakes]:
    voice = HeldVoice()
    with FakeHTTPServer(voice) as server:
        yield Fakes(model_server, voice, server)
        voice.release.set()


@pytest.fixture(autouse=True)
def _fresh(fakes: Fakes) -> Iterator[None]:
    yield
    fakes.let_go()
    fakes.voice_server.requests.clear()


@pytest.fixture(scope="module")
def served(dev_server: DevServer, folder: Path) -> Iterator[str]:
    """``starter.py serve`` on the dev server, with the default wait for a flow's answer."""
    server = ServeProcess(dev_server.address, free_port(), folder / "serve.log", folder / "home")
    deadline = time.monotonic() + 30
    while not (folder / "home" / ANNOUNCEMENT).exists():  # where the workers send the prose previews
        assert time.monotonic() < deadline, (folder / "serve.log").read_text()
        time.sleep(0.05)
    yield server.url
    server.kill()


@pytest.fixture(scope="module")
async def workers(dev_server: DevServer, client: Client, model_server: FakeModelServer,
                  search_server: FakeSearchServer, fakes: Fakes, folder: Path, served: str,
                  ) -> AsyncIterator[WorkerSlot]:
    slot = WorkerSlot(dev_server.address, client, model_server, search_server, folder, env={
        "DEERFLOW_HOME": str(folder / "home"), "DEERFLOW_TTS_URL": f"{fakes.voice_server.base_url}/v1",
        "LLM_MAX_CONCURRENCY": "1", "DEERFLOW_TOOLS_QUEUE_CONCURRENCY": "1", "DEERFLOW_MAIN_QUEUE_CONCURRENCY": "2"})
    yield slot
    slot.stop()


@dataclass
class Undisturbed:
    """A flow's answer from a run nobody disturbed, and the lines its podcast had spoken."""

    answer: object
    spoken: Counter[str]


@pytest.fixture(scope="module")
async def undisturbed(served: str, workers: WorkerSlot, fakes: Fakes) -> dict[str, Undisturbed]:
    """Each flow's answer from a run nobody disturbed, by flow name: what a disturbed run must answer."""
    await workers.live()
    answers = {}
    for flow in FLOWS:
        fakes.voice_server.requests.clear()
        exchange = Exchange(served, flow)
        answers[flow.name] = Undisturbed(exchange.answer(await exchange.run()), fakes.lines_spoken())
    return answers


# ---------------------------------------------------------------- a worker lost mid-flow


async def lose_worker(flow: Flow, sig: signal.Signals, served: str, workers: WorkerSlot, fakes: Fakes,
                      **replacement_env: str) -> object:
    """Start ``flow`` through its endpoint, end its worker with ``sig`` while the flow's call is held,
    start a replacement at once (with ``replacement_env`` added), and return what the request answered."""
    await workers.live()
    fakes.model.requests.clear()
    fakes.voice_server.requests.clear()
    flow.hold(fakes, HELD_SECONDS if sig is signal.SIGKILL else DRAINED_SECONDS)
    exchange = Exchange(served, flow)
    request = asyncio.create_task(exchange.run())
    await wait_until(lambda: flow.held(fakes, exchange) or request.done(), f"the {flow.name}'s held call", 60)
    assert not request.done(), "the flow answered before its call was held"

    old = workers.current
    assert old is not None and old.process is not None
    if sig is signal.SIGKILL:
        workers.kill()
        fakes.let_go()
    else:
        old.process.send_signal(signal.SIGTERM)  # as `docker compose stop` does, to the main process
    env = workers.env
    workers.env = {**env, **replacement_env}
    try:
        workers.launch()  # the replacement, started at once (beside the stopping one, as a deploy does)
    finally:
        workers.env = env
    answer = exchange.answer(await asyncio.wait_for(request, WAIT_SECONDS))
    if sig is signal.SIGTERM:
        assert await exit_code(old, 30) == 0
    return answer


# SIGKILL for every flow: each retries its own kind of call. SIGTERM (a drain: the call in flight ends
# on the stopping worker) for the two kinds of call the flows hold, a voice line and a streamed model
# call; the slide composer's and the judge's are model calls like prose's (and tests/test_graceful_stop.py's).
LOSSES = [*[(flow, signal.SIGKILL) for flow in FLOWS],
          *[(flow, signal.SIGTERM) for flow in FLOWS if flow.name in ("podcast", "prose")]]


@pytest.mark.parametrize(("flow", "sig"), LOSSES, ids=[f"{flow.name}-{sig.name.lower()}" for flow, sig in LOSSES])
async def test_a_flow_answers_as_if_its_worker_never_left(flow: Flow, sig: signal.Signals, served: str,
                                                           workers: WorkerSlot, fakes: Fakes,
                                                           undisturbed: dict[str, Undisturbed]) -> None:
    expected = undisturbed[flow.name]
    assert await lose_worker(flow, sig, served, workers, fakes) == expected.answer
    lost = 1 if sig is signal.SIGKILL else 0  # the call the killed worker was in is made once more
    if flow.name == "podcast":  # every line spoken once, but the one the killed worker was reading
        spoken = fakes.lines_spoken()
        assert set(spoken) == set(expected.spoken) and set(expected.spoken.values()) == {1}
        assert sum(spoken.values()) == len(spoken) + lost and max(spoken.values()) == 1 + lost, spoken
        assert len(fakes.model.requests_for("podcast_script_writer")) == 1
    else:
        assert len(fakes.model.requests_for(flow.agent or "")) == 1 + lost


async def test_a_line_lost_where_no_successor_reclaims_it_is_spoken_again_within_seconds(
        served: str, client: Client, workers: WorkerSlot, fakes: Fakes, undisturbed: dict[str, Undisturbed]) -> None:
    """The replacement does not reclaim the dead worker's attempts, as on another host or in a new
    container: the line in flight is retried once its heartbeat stops (10 s), not after its 90 s."""
    podcast = FLOW["podcast"]
    answer = await lose_worker(podcast, signal.SIGKILL, served, workers, fakes,
                               DEERFLOW_RECLAIM_LOST_ATTEMPTS="false")
    assert answer == undisturbed[podcast.name].answer
    runs = [run async for run in client.list_workflows('WorkflowType="PodcastWorkflow"')]
    latest = max(runs, key=lambda run: run.start_time)
    causes = retry_causes(await client.get_workflow_handle(latest.id).fetch_history())
    assert list(causes.values()) == ["timeout:TIMEOUT_TYPE_HEARTBEAT"]


# ---------------------------------------------------------------- no worker comes back


async def test_without_a_worker_the_request_ends_with_a_clear_error(dev_server: DevServer, client: Client,
                                                                    folder: Path, workers: WorkerSlot,
                                                                    fakes: Fakes) -> None:
    """The worker dies mid-flow and none replaces it: the request answers a 504 saying why once its wait
    (DEERFLOW_WEB_CONTENT_WAIT) is over, rather than hanging; the run has ended too."""
    wait = 4
    short = ServeProcess(dev_server.address, free_port(), folder / "serve-short.log", folder / "home-short",
                         env={"DEERFLOW_WEB_CONTENT_WAIT": str(wait)})
    try:
        await workers.live()
        flow = FLOW["slides"]
        flow.hold(fakes, HELD_SECONDS)
        exchange = Exchange(short.url, flow)
        request = asyncio.create_task(exchange.run())
        await wait_until(lambda: flow.held(fakes, exchange) or request.done(), "the composer's call", 30)
        workers.kill()
        fakes.let_go()
        started = time.monotonic()
        response = await asyncio.wait_for(request, 30)
    finally:
        short.kill()
    assert time.monotonic() - started < wait + 10
    assert response.status_code == 504, response.text
    assert response.json()["detail"] == f"the slide composer did not answer within {wait} s (is a worker running?)"
    ended = 'WorkflowType="SlideComposerWorkflow" AND ExecutionStatus="TimedOut"'
    await listed(client, ended, bool, timeout=15)  # the run ended with the wait


# ---------------------------------------------------------------- many at once


async def test_several_flows_at_once_on_one_slow_worker_all_finish(served: str, workers: WorkerSlot, fakes: Fakes,
                                                                   undisturbed: dict[str, Undisturbed]) -> None:
    """Two of each flow started together on the one worker (one model call and one speech line at a
    time, each model call slowed): every request answers what an undisturbed run of its flow did."""
    await workers.live()
    fakes.model.latency_seconds = 0.2
    exchanges = [Exchange(served, flow) for flow in FLOWS for _ in range(2)]
    responses = await asyncio.wait_for(asyncio.gather(*(exchange.run() for exchange in exchanges)), WAIT_SECONDS)
    assert [exchange.answer(response) for exchange, response in zip(exchanges, responses, strict=True)] == [
        undisturbed[exchange.flow.name].answer for exchange in exchanges]
