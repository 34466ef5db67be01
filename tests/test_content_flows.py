"""The content flows' workflows on the time-skipping server, and their pure parts.

Figures for the sample report are DeerFlow's own (its ``src/eval/metrics.py`` and evaluator run
on the same text once, by hand), so a drift from its formula shows here.
"""

from __future__ import annotations

import base64
import io
import json
import uuid

import pytest
from pptx import Presentation
from temporalio.client import Client, WorkflowFailureError

from activities.content.speech import synthesize
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault
from runtime import artefacts
from tests.support.fake_http import FakeHTTPServer, Reply, Seen
from tests.support.runs import SAMPLE_REPORT
from tests.support.workers import WorkerWith
from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.evaluation import EVALUATOR_WORKFLOW, EvaluateRequest, EvaluationResult, parse_judgement
from workflows.contracts.podcast import (
    MAX_LINE_CHARS,
    MAX_LINES,
    NO_VOICE_MESSAGE,
    PODCAST_WORKFLOW,
    NoScript,
    PodcastRequest,
    PodcastResult,
    SpeechRequest,
    script_from_reply,
)
from workflows.contracts.prose import PROSE_WORKFLOW, ProseOption, ProseRequest, ProseResult
from workflows.contracts.report_metrics import compute_metrics, grade, metrics_score
from workflows.contracts.research import TASK_QUEUE
from workflows.contracts.slides import MAX_SLIDES, SLIDES_WORKFLOW, SlidesRequest, SlidesResult, deck_from_reply

pytestmark = pytest.mark.timeout(60)


def test_metrics_are_deerflows_for_each_style() -> None:
    news = compute_metrics(SAMPLE_REPORT, "news")
    assert (news.word_count, news.citation_count, news.unique_sources, news.image_count) == (91, 6, 3, 1)
    assert news.sections_missing == [] and news.section_coverage_score == 1.0 and news.has_citations_section
    academic = compute_metrics(SAMPLE_REPORT, "academic")
    assert academic.sections_missing == ["literature_review", "methodology"]
    assert academic.section_coverage_score == pytest.approx(5 / 7)
    assert compute_metrics(SAMPLE_REPORT, "social_media").section_count == 4
    chinese = compute_metrics("# 标题\n\n## 要点\n背景 分析 https://a.cn/x [x](https://b.cn/y)", "academic")
    assert (chinese.word_count, chinese.citation_count, chinese.unique_sources) == (17, 1, 2)
    assert chinese.sections_missing == ["literature_review", "methodology", "key_citations"]


def test_score_and_grade_follow_deerflows_formula() -> None:
    assert metrics_score(compute_metrics(SAMPLE_REPORT, "news"), "news") == 5.92
    assert grade(5.92) == "C" and grade(9.0) == "A+" and grade(3.99) == "F"
    assert metrics_score(compute_metrics("", "news"), "news") == 0.0


def test_a_judge_reply_is_bounded_and_weighted() -> None:
    judged = parse_judgement('```json\n{"scores": {"factual_accuracy": 99, "completeness": "8", "coherence": -3,'
                             ' "relevance": 7, "citation_quality": 6, "writing_quality": null}, "overall_score": 7,'
                             ' "strengths": ["a", "b", "c", "d", "e", "f", "g"], "weaknesses": "not a list"}\n```')
    assert judged.scores == {"factual_accuracy": 10, "completeness": 8, "coherence": 0, "relevance": 7,
                             "citation_quality": 6, "writing_quality": 0}
    assert judged.weighted_score == 5.75 and len(judged.strengths) == 5 and judged.weaknesses == []
    fallback = parse_judgement("I think it is fine.")
    assert set(fallback.scores.values()) == {5} and fallback.weaknesses == ["Evaluation parsing failed"]


async def _evaluate(client: Client, request: object) -> EvaluationResult:
    return await client.execute_workflow(EVALUATOR_WORKFLOW, request, id=f"eval-{uuid.uuid4().hex[:8]}",
                                         task_queue=TASK_QUEUE, result_type=EvaluationResult)


async def test_evaluation_with_the_model_as_judge(time_worker: Client, model_server: FakeModelServer) -> None:
    result = await _evaluate(time_worker, EvaluateRequest(content=SAMPLE_REPORT, query="tidal power",
                                                          report_style="news", use_llm=True))
    assert result.metrics.citation_count == 6 and result.llm_evaluation is not None
    judged = result.llm_evaluation
    assert judged.scores["factual_accuracy"] == 9 and judged.overall_score > 0
    assert result.score == round(5.92 * 0.4 + judged.weighted_score * 0.6, 2) and result.grade == grade(result.score)
    assert result.summary and result.summary.startswith(f"Report Grade: {result.grade}")
    [sent] = model_server.requests_for("report_judge")
    assert "Original research query: tidal power" in sent["messages"][-1]["content"]


async def test_metrics_alone_call_no_model(time_worker: Client, model_server: FakeModelServer) -> None:
    result = await _evaluate(time_worker, EvaluateRequest(content=SAMPLE_REPORT, report_style="NEWS"))
    assert (result.score, result.grade, result.llm_evaluation) == (5.92, "C", None)
    assert model_server.requests_for("report_judge") == []


async def test_a_judge_that_fails_for_good_leaves_the_metrics(time_worker: Client,
                                                               model_server: FakeModelServer) -> None:
    model_server.inject(Fault.status(401, "bad key", agent="report_judge"))
    result = await _evaluate(time_worker, EvaluateRequest(content=SAMPLE_REPORT, report_style="news", use_llm=True))
    assert (result.score, result.llm_evaluation) == (5.92, None)


@pytest.mark.parametrize("request_body", [{"content": 42}, {"content": "x", "use_llm": "yes"}, {}])
async def test_a_bad_evaluation_input_fails_the_run_at_once(time_worker: Client, request_body: object) -> None:
    with pytest.raises(WorkflowFailureError) as failed:
        await _evaluate(time_worker, request_body)
    assert "Invalid request" in str(failed.value.cause)


# ---------------------------------------------------------------- prose


async def _prose(client: Client, request: object) -> ProseResult:
    return await client.execute_workflow(PROSE_WORKFLOW, request, id=f"prose-{uuid.uuid4().hex[:8]}",
                                         task_queue=TASK_QUEUE, result_type=ProseResult)


@pytest.mark.parametrize(("option", "expected"), [
    ("continue", "The evidence gathered so far points the same way"),
    ("shorter", "Tides rise twice a day."),
    ("fix", "Tides rise twice a day. They are predictable."),
    ("zap", "(as asked: make it a question)"),
])
async def test_each_prose_option_has_its_prompt(time_worker: Client, model_server: FakeModelServer, option: str,
                                                expected: str) -> None:
    request = ProseRequest(prompt="Tides rise twice a day. they are predictable.", option=ProseOption(option),
                           command="make it a question" if option == "zap" else "")
    result = await _prose(time_worker, request)
    assert expected in result.text
    [sent] = model_server.requests_for("prose_writer")
    assert f"Task: {option}" in sent["messages"][0]["content"]


@pytest.mark.parametrize("body", [{"prompt": "x", "option": "summarise"}, {"prompt": "x", "option": "zap"},
                                  {"prompt": 7, "option": "fix"}])
async def test_a_bad_prose_input_fails_the_run_at_once(time_worker: Client, body: object) -> None:
    with pytest.raises(WorkflowFailureError) as failed:
        await _prose(time_worker, body)
    assert "Invalid request" in str(failed.value.cause)


# ---------------------------------------------------------------- slides


async def test_the_deck_keeps_titles_bullets_and_tables(time_worker: Client, worker_settings: Settings) -> None:
    result = await time_worker.execute_workflow(
        SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT), id=f"slides-{uuid.uuid4().hex[:8]}",
        task_queue=TASK_QUEUE, result_type=SlidesResult)
    assert result.pptx.inline is None and result.pptx.claim  # in the blob store, not in history
    deck = Presentation(io.BytesIO(await artefacts.get(worker_settings, result.pptx)))
    titles = [slide.shapes.title.text for slide in deck.slides]
    assert titles == ["Tidal power in 2030", "Key Points", "Overview", "Detailed Analysis", "Key Citations"]
    texts = [shape.text_frame.text for shape in deck.slides[1].shapes if shape.has_text_frame]
    assert "Tidal stream turbines produce predictable power EMEC." in "\n".join(texts)
    [table] = [shape.table for shape in deck.slides[3].shapes if shape.has_table]
    assert [[cell.text for cell in row.cells] for row in table.rows] == [
        ["Site", "Capacity (MW)"], ["MeyGen", "6"], ["Paimpol", "2"]]


async def test_a_composer_reply_without_slides_fails_with_the_reason(time_worker: Client,
                                                                      model_server: FakeModelServer) -> None:
    model_server.inject(Fault.non_json_plan(agent="presentation_composer"))
    with pytest.raises(WorkflowFailureError) as failed:
        await time_worker.execute_workflow(SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT),
                                           id=f"slides-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE)
    assert "not JSON" in str(failed.value.cause)


def test_the_deck_schema_is_bounded() -> None:
    flood = {"title": "t" * 500, "slides": [{"title": f"s{i}", "bullets": ["b" * 900] * 20,
                                              "table": {"header": ["h"] * 20, "rows": [["c"] * 30] * 20}}
                                             for i in range(40)] + ["junk", {"title": "no content"}]}
    deck = deck_from_reply(json.dumps(flood))
    assert len(deck.slides) == MAX_SLIDES and len(deck.title) == 150
    slide = deck.slides[0]
    assert len(slide.bullets) == 8 and len(slide.bullets[0]) == 300
    assert slide.table is not None and len(slide.table.header) == 6 and len(slide.table.rows) == 12
    assert all(len(row) == 6 for row in slide.table.rows)


# ---------------------------------------------------------------- podcast


def _speech(seen: Seen) -> Reply:
    body = seen.json()
    return Reply(body=f"[{body['voice']}:{body['input'][:12]}]".encode())


async def _podcast(client: Client) -> PodcastResult:
    return await client.execute_workflow(PODCAST_WORKFLOW, PodcastRequest(content=SAMPLE_REPORT),
                                         id=f"podcast-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE,
                                         result_type=PodcastResult)


async def test_each_line_is_spoken_by_its_voice_and_joined_in_order(
        worker_settings: Settings, worker_with: WorkerWith) -> None:
    with FakeHTTPServer(_speech) as tts:
        async with worker_with(worker_settings.model_copy(update={"tts_url": f"{tts.base_url}/v1",
                                                                  "tts_api_key": "tts-key-0123456789"})) as client:
            result = await _podcast(client)
    lines = result.script.lines
    assert len(lines) >= 4 and [line.speaker for line in lines[:2]] == ["male", "female"]
    audio = await artefacts.get(worker_settings, result.audio)
    assert audio == b"".join(f"[{'onyx' if line.speaker == 'male' else 'nova'}:{line.paragraph[:12]}]".encode()
                             for line in lines)
    assert {seen.path for seen in tts.requests} == {"/v1/audio/speech"}
    assert all(seen.headers["authorization"] == "Bearer tts-key-0123456789" for seen in tts.requests)
    assert tts.requests[0].json()["model"] == "tts-1" and result.note is None


async def test_the_lines_of_a_podcast_reuse_the_connection(worker_settings: Settings) -> None:
    """Each line is a call of its own: a client per call opened a connection (to an https
    endpoint, a TLS handshake) per line."""
    with FakeHTTPServer(_speech) as tts:
        voice = worker_settings.model_copy(update={"tts_url": f"{tts.base_url}/v1", "tts_api_key": "tts-0123456789"})
        clips = [await synthesize(voice, SpeechRequest(text=f"Line {n}", speaker="female")) for n in range(3)]
    assert clips == [f"[nova:Line {n}]".encode() for n in range(3)]
    assert len({seen.client_port for seen in tts.requests}) == 1


async def test_without_a_voice_the_script_comes_back_with_a_note(time_worker: Client) -> None:
    result = await _podcast(time_worker)
    assert result.audio is None and result.note == NO_VOICE_MESSAGE
    assert "Tidal power" in " ".join(line.paragraph for line in result.script.lines)


async def test_a_refusing_voice_fails_the_podcast_without_retries(
        worker_settings: Settings, worker_with: WorkerWith) -> None:
    with FakeHTTPServer(lambda seen: Reply(status=401, body={"error": "bad key"})) as tts:
        async with worker_with(worker_settings.model_copy(update={"tts_url": f"{tts.base_url}/v1"})) as client:
            with pytest.raises(WorkflowFailureError) as failed:
                await _podcast(client)
    assert "answered 401" in str(failed.value.cause.cause) and len(tts.requests) == 1


def test_a_script_is_bounded_and_plain() -> None:
    reply = json.dumps({"lines": [{"speaker": "narrator", "paragraph": "**Hello** [Deer](https://x.org)"},
                                  {"speaker": "female", "paragraph": ""}, {"paragraph": 5}]
                        + [{"speaker": "female", "paragraph": "y" * 5000}] * 100})
    script = script_from_reply(reply)
    assert script.lines[0].model_dump() == {"speaker": "male", "paragraph": "Hello Deer"}
    assert len(script.lines) == MAX_LINES and len(script.lines[1].paragraph) == MAX_LINE_CHARS
    with pytest.raises(NoScript):
        script_from_reply('{"lines": [{"speaker": "male", "paragraph": "  "}]}')


async def test_deerflows_volcengine_settings_give_the_voices(
        worker_settings: Settings, worker_with: WorkerWith) -> None:
    def volcengine(seen: Seen) -> Reply:
        body = seen.json()
        clip = f"<{body['audio']['voice_type']}>".encode()
        return Reply(body={"code": 3000, "message": "Success", "data": base64.b64encode(clip).decode()})

    with FakeHTTPServer(volcengine) as tts:
        volcengine_voice = worker_settings.model_copy(update={
            "volcengine_tts_appid": "app-1", "volcengine_tts_access_token": "volc-token-0123456789",
            "volcengine_tts_url": f"{tts.base_url}/api/v1/tts"})
        async with worker_with(volcengine_voice) as client:
            result = await _podcast(client)
    assert await artefacts.get(worker_settings, result.audio) == b"".join(
        b"<BV002_streaming>" if line.speaker == "male" else b"<BV001_streaming>" for line in result.script.lines)
    first = tts.requests[0]
    assert first.headers["authorization"] == "Bearer;volc-token-0123456789"
    assert first.json()["app"] == {"appid": "app-1", "token": "volc-token-0123456789", "cluster": "volcano_tts"}
    assert first.json()["request"]["text"] == result.script.lines[0].paragraph


def test_an_inline_file_survives_json() -> None:
    """With DEERFLOW_PAYLOAD_STORE=none the bytes travel in the payload: MP3 is not UTF-8."""
    ref = ArtefactRef(size=3, inline=b"\xff\xfb\x00")
    assert ArtefactRef.model_validate_json(ref.model_dump_json()) == ref
