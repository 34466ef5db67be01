"""``starter.py evaluate|slides|podcast ID`` on a finished run, against the time-skipping server.

The commands' own code (finding the finished report, starting the flow, writing the file, the
one-line refusal) runs as the CLI runs it; only the connection is the test's worker client.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import pytest
from pptx import Presentation
from temporalio.client import Client

from cli import content
from config.settings import Settings
from runtime.front_door import CliError
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.runs import QUESTION, SAMPLE_REPORT
from tests.support.workers import WorkerWith
from workflows.contracts.podcast import NO_VOICE_MESSAGE
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.slides import SLIDES_WORKFLOW, SlidesRequest, SlidesResult

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
async def finished(time_worker: Client) -> str:
    run = f"research-cli-{uuid.uuid4().hex[:8]}"
    await time_worker.execute_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True,
                                                                      max_step_num=1),
                                       id=run, task_queue=TASK_QUEUE, result_type=ResearchResult)
    return run


def cli_connects_to(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    async def connect(*_: object, **__: object) -> Client:
        return client

    monkeypatch.setattr(content, "connect", connect)


@pytest.fixture(autouse=True)
def cli_on_worker(time_worker: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    cli_connects_to(time_worker, monkeypatch)


async def test_evaluate_prints_grade_metrics_and_the_models_view(
        finished: str, worker_settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(id=finished, style="academic", llm=True)
    assert await content.evaluate_command(args, worker_settings) == 0
    out = capsys.readouterr().out
    assert out.startswith("Grade ") and "citations" in out and "Missing: " in out and "Model's scores: " in out


async def test_slides_writes_a_deck(finished: str, tmp_path: Path, worker_settings: Settings,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    deck = tmp_path / "deck.pptx"
    assert await content.slides_command(argparse.Namespace(id=finished, output=str(deck)), worker_settings) == 0
    slides = Presentation(str(deck)).slides
    assert len(slides) >= 3 and f"Wrote {deck} ({len(slides)} slides" in capsys.readouterr().out


async def test_podcast_without_a_voice_says_so_and_keeps_the_script(finished: str, tmp_path: Path,
                                                                     worker_settings: Settings) -> None:
    with pytest.raises(CliError) as refused:
        await content.podcast_command(argparse.Namespace(id=finished, output=str(tmp_path / "talk.mp3")),
                                      worker_settings)
    assert str(refused.value).startswith(NO_VOICE_MESSAGE) and "talk.txt" in str(refused.value)
    assert (tmp_path / "talk.txt").read_text().startswith("Male: Hello Deer!")
    assert not (tmp_path / "talk.mp3").exists()


async def test_podcast_with_a_voice_writes_the_mp3(finished: str, tmp_path: Path, worker_settings: Settings,
                                                   worker_with: WorkerWith, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHTTPServer(lambda seen: Reply(body=b"\xff\xfbclip")) as tts:
        async with worker_with(worker_settings.model_copy(update={"tts_url": f"{tts.base_url}/v1"})) as client:
            cli_connects_to(client, monkeypatch)
            args = argparse.Namespace(id=finished, output=str(tmp_path / "t.mp3"))
            assert await content.podcast_command(args, worker_settings) == 0
    assert (tmp_path / "t.mp3").read_bytes() == b"\xff\xfbclip" * len(tts.requests)


async def test_a_run_without_a_report_is_one_line(time_worker: Client, worker_settings: Settings) -> None:
    with pytest.raises(CliError, match="No research run with ID 'nope'"):
        await content.evaluate_command(argparse.Namespace(id="nope", style="academic", llm=False), worker_settings)




async def test_a_content_flows_run_is_one_line_naming_what_it_is(time_worker: Client,
                                                                  worker_settings: Settings) -> None:
    """Issue #42 §9: its result is no report, so the refusal says so (it was pydantic's many lines)."""
    slides_run = f"slides-{uuid.uuid4().hex[:8]}"
    await time_worker.execute_workflow(SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT), id=slides_run,
                                       task_queue=TASK_QUEUE, result_type=SlidesResult)
    with pytest.raises(CliError) as refused:
        await content.evaluate_command(argparse.Namespace(id=slides_run, style="academic", llm=False),
                                       worker_settings)
    assert str(refused.value) == (f"{slides_run} is not a research run (it is a {SLIDES_WORKFLOW}): only a "
                                  "research run has a report to work on.")
    assert refused.value.exit_code == 2
