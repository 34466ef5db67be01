"""Our page offers DeerFlow's content flows for a finished report, in headless Chromium: the
evaluation (metrics, then the model's judgement), the slides as a .pptx download, the podcast to
play and save (or, without a voice, the message and the script), and prose editing of the report.

The session's worker on the time-skipping server runs the real content workflows against the fake
model; a fake OpenAI-compatible speech server on loopback is the voice. The finished report is a
stand-in run's (tests/support/stand_in_runs.py).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pptx import Presentation
from temporalio.client import Client

from config.settings import Settings
from offline.content_agents import prose_writer
from offline.model_faults import Fault
from offline.model_server import FakeModelServer
from tests.support.cdp import Page, chromium_path
from tests.support.fake_http import FakeHTTPServer, fake_speech
from tests.support.processes import free_port
from tests.support.runs import SAMPLE_REPORT
from tests.support.stand_in_runs import stand_in_runs
from tests.support.web_server import api_server
from tests.support.workers import WorkerWith
from workflows.contracts.podcast import NO_VOICE_MESSAGE
from workflows.contracts.slides import PPTX_MEDIA_TYPE

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(150),
]
TOKEN = "page-content-token-0123456789abcd"
SCREENSHOTS = Path("/tmp/our-page")  # kept outside pytest's tmp dir for a person to look at
SELECTED = "Tidal energy uses the rise and fall of the sea. It is predictable years ahead."
# Every blob the page hands out (downloads, the podcast's audio) as [type, base64], and every
# Content-Security-Policy refusal (a blocked player would be one).
CAPTURE = """window.__blobs = []; window.__refused = [];
document.addEventListener('securitypolicyviolation', (e) => window.__refused.push(e.violatedDirective));
const original = URL.createObjectURL;
URL.createObjectURL = (blob) => {
  blob.arrayBuffer().then((b) => window.__blobs.push(
    [blob.type, btoa(String.fromCharCode(...new Uint8Array(b)))]));
  return original(blob);
};
true"""


@pytest.fixture
def tts() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer(fake_speech) as server:
        yield server


@contextlib.asynccontextmanager
async def serving(worker_with: WorkerWith, worker_settings: Settings, voice: str | None) -> AsyncIterator[str]:
    """The API server, and a worker of its own whose previews go to it and whose voice is ``voice``
    (a speech endpoint, or None: no voice configured); yields the server's URL."""
    settings = worker_settings.model_copy(update={"web_token": None, "token_stream_token": TOKEN})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The previews' sends may take their longest (see tests/test_api_content.py's ``served``).
    worker = settings.model_copy(update={"token_stream_url": f"{url}/internal/token-stream",
                                         "token_stream_timeout": 10.0, "tts_url": voice})
    async with worker_with(worker) as client, api_server(client, settings, port=port):
        yield url


@pytest.fixture
async def base(worker_with: WorkerWith, worker_settings: Settings, tts: FakeHTTPServer) -> AsyncIterator[str]:
    """The API server; the worker's previews go to it, and its voice is the fake speech server."""
    async with serving(worker_with, worker_settings, f"{tts.base_url}/v1") as url:
        yield url


@pytest.fixture
async def finished(time_worker: Client) -> AsyncIterator[str]:
    """A finished run with the sample report; its worker answers the page until the test ends."""
    async with stand_in_runs(time_worker) as start:
        handle = await start(SAMPLE_REPORT, question="What will tidal power deliver by 2030?")
        await handle.result()
        yield handle.id


async def blob(page: Page, kind: str) -> bytes:
    found = await page.wait_for(f"window.__blobs.find(([type]) => type === {json.dumps(kind)})", 60,
                                what=f"a {kind} download")
    return base64.b64decode(found[1])


async def notice(page: Page) -> str:
    """The flows' notice once the button is free again (its flow answered)."""
    return await page.wait_for("!document.querySelector('#flows button[disabled]') && "
                               "(document.getElementById('flow-notice').textContent || ' ')", 60, what="an answer")


async def test_a_finished_report_offers_the_content_flows(
        base: str, finished: str, page: Page, worker_settings: Settings, worker_with: WorkerWith) -> None:
    try:
        await page.navigate(f"{base}/?run={finished}")
        await page.wait_for("!document.getElementById('flows').hidden", 30, what="the content flows")
        await page.evaluate(CAPTURE)

        await page.press("#slides")
        deck = Presentation(io.BytesIO(await blob(page, PPTX_MEDIA_TYPE)))
        assert deck.slides[0].shapes.title.text == "Tidal power in 2030"

        await page.press("#podcast")
        audio = await blob(page, "audio/mp3")
        assert audio.startswith(b"[onyx:Hello Deer! ]")
        assert await page.evaluate("document.getElementById('podcast-audio').src.startsWith('blob:') && "
                                   "document.getElementById('podcast-download').download.endsWith('.mp3')")
        assert await notice(page) == " " and await page.evaluate("window.__refused") == []

        async with serving(worker_with, worker_settings, None) as quiet:  # no voice configured
            await page.navigate(f"{quiet}/?run={finished}")
            await page.wait_for("!document.getElementById('flows').hidden", 30, what="the content flows")
            await page.evaluate(CAPTURE)
            await page.press("#podcast")
            assert await notice(page) == NO_VOICE_MESSAGE
            assert await page.evaluate("document.querySelectorAll('#podcast-script li').length") > 2

            # Prose: a selection made shorter by the prose writer, used, and the edits saved.
            await page.press("#edit-report")
            start = SAMPLE_REPORT.index(SELECTED)
            await page.evaluate(f"document.getElementById('editor-text').setSelectionRange({start}, "
                                f"{start + len(SELECTED)}); "
                                "document.getElementById('prose-option').value = 'shorter'; true")
            await page.press("#prose-form button")
            shorter = prose_writer("Task: shorter", f"Text:\n{SELECTED}")
            assert await notice(page) == " "
            assert await page.evaluate("document.getElementById('prose-text').textContent") == shorter
            await page.press("#prose-use")
            await page.press("#editor-save")
            edited = SAMPLE_REPORT.replace(SELECTED, shorter)
            assert await page.evaluate("window.deerflowPage.state.report") == edited
            assert SELECTED not in await page.evaluate("document.getElementById('report').innerText")
            await page.press("#export-md")
            assert (await blob(page, "text/markdown")).decode() == edited  # the exports carry the edits
            SCREENSHOTS.mkdir(exist_ok=True)
            await page.screenshot(SCREENSHOTS / "content-flows.png")
    except Exception:
        SCREENSHOTS.mkdir(exist_ok=True)
        await page.screenshot(SCREENSHOTS / "content-flows-failure.png")
        raise


@pytest.mark.parametrize("width", [1280, 390])
async def test_the_evaluation_shows_its_metrics_once_and_why_the_grade_moved(
        base: str, finished: str, page: Page, width: int) -> None:
    """#49 §2: the metrics were shown twice, and the grade went from D to C with no word of why."""
    await page.use_width(width)
    await page.navigate(f"{base}/runs/{finished}")
    await page.wait_for("!document.getElementById('flows').hidden", 30, what="the content flows")
    await page.press("#evaluate")
    await page.wait_for("!document.getElementById('evaluation').hidden", 60, what="the evaluation")
    metrics = await page.evaluate("document.getElementById('evaluation').innerText")
    assert metrics.startswith("Grade ") and "words" in metrics and "Sections missing" in metrics, metrics
    await page.press("#evaluation button")
    judged = await page.wait_for("document.getElementById('evaluation').innerText.includes(\"The model's scores\")"
                                 " && document.getElementById('evaluation').innerText", 60,
                                 what="the model's evaluation")
    # The metrics once, and why the grade moved: the metrics' own grade and the 40/60 weighing.
    assert judged.count("Sections missing") == 1 and "the metrics alone gave " in judged, judged
    assert "metrics 40 % and the model 60 %" in judged and "**" not in judged, judged
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / f"evaluation-{width}.png")


# From the Key Points heading to the blank line before "## Detailed Analysis": a list, a heading and
# a paragraph, with the line breaks around them.
MULTI_LINE = SAMPLE_REPORT[SAMPLE_REPORT.index("## Key Points"):SAMPLE_REPORT.index("## Detailed Analysis")]


async def select_and_ask(page: Page, selected: str, option: str) -> None:
    await page.press("#edit-report")
    start = SAMPLE_REPORT.index(selected)
    await page.evaluate(f"document.getElementById('editor-text').setSelectionRange({start}, "
                        f"{start + len(selected)}); document.getElementById('prose-option').value = '{option}'; true")
    await page.press("#prose-form button")


@pytest.mark.parametrize("width", [1280, 390])
async def test_ask_ai_keeps_a_multi_line_selections_line_breaks_and_says_when_it_fails(
        base: str, finished: str, page: Page, model_server: FakeModelServer, width: int) -> None:
    await page.use_width(width)
    await page.navigate(f"{base}/?run={finished}")
    await page.wait_for("!document.getElementById('flows').hidden", 30, what="the content flows")
    await select_and_ask(page, MULTI_LINE, "improve")
    assert await notice(page) == " "
    improved = prose_writer("Task: improve", f"Text:\n{MULTI_LINE}")
    assert await page.evaluate("document.getElementById('prose-text').textContent") == improved
    await page.press("#prose-use")
    edited = await page.evaluate("document.getElementById('editor-text').value")
    # The answer in the selection's place, with the selection's own breaks around it: every heading
    # keeps a line of its own, and the list stays a list.
    assert edited == SAMPLE_REPORT.replace(MULTI_LINE, f"{improved}\n\n")
    assert "\n\n## Detailed Analysis\n" in edited and "\n- Costs fell" in edited and "\n## Overview\n" in edited
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / f"prose-multi-line-{width}.png")

    model_server.inject(Fault.status(401, "Incorrect API key provided", agent="prose_writer"))
    await select_and_ask(page, SELECTED, "shorter")
    said = await notice(page)
    assert "prose writer failed" in said and "Incorrect API key" in said, said
    assert await page.evaluate("document.getElementById('prose-result').hidden")  # nothing offered to use
    await page.screenshot(SCREENSHOTS / f"prose-failed-{width}.png")
