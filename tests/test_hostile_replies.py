"""Hostile model replies in the content flows, on the time-skipping server (issue #42 §2).

A reply the flow cannot use (a lone surrogate escape, JSON thousands of levels deep) must end the
run at once with the reason, or be read as far as it is usable; it must never fail a workflow task,
which the server retries until the request gives up (a 504 where a prompt 502 is due).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from offline.model_server import FakeModelServer, Fault
from tests.support.runs import SAMPLE_REPORT
from workflows.evaluation import EVALUATOR_WORKFLOW, EvaluateRequest, EvaluationResult
from workflows.models import TASK_QUEUE
from workflows.podcast import PODCAST_WORKFLOW, PodcastRequest, PodcastResult
from workflows.reply_json import MAX_REPLY_DEPTH
from workflows.slides import SLIDES_WORKFLOW, SlidesRequest, SlidesResult

pytestmark = pytest.mark.timeout(60)

DEEP = "```json\n" + "[" * 3000 + "]" * 3000 + "\n```"  # past json.loads' recursion limit
DEEPER_THAN_ALLOWED = '{"slides": ' + "[" * (MAX_REPLY_DEPTH + 5) + "]" * (MAX_REPLY_DEPTH + 5) + "}"
SURROGATE_DECK = ('{"title": "Tides \\ud800", "slides": [{"title": "Why \\udfff", "bullets": ["Predictable'
                  ' \\ud800\\ud800"]}]}')
SURROGATE_SCRIPT = '{"lines": [{"speaker": "male", "paragraph": "Tides \\ud800 rise."}]}'
SURROGATE_JUDGEMENT = ('{"scores": {"factual_accuracy": 9}, "overall_score": 8, "strengths": ["Clear \\ud800"],'
                       ' "weaknesses": ["\\udc00"]}')
# (workflow, request, result type, the fake model's agent)
FLOWS: dict[str, tuple[str, Any, type, str]] = {
    "slides": (SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT), SlidesResult, "presentation_composer"),
    "podcast": (PODCAST_WORKFLOW, PodcastRequest(content=SAMPLE_REPORT), PodcastResult, "podcast_script_writer"),
}


async def _start(client: Client, workflow: str, request: Any, result_type: type) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(workflow, request, id=f"hostile-{uuid.uuid4().hex[:8]}",
                                       task_queue=TASK_QUEUE, result_type=result_type)


async def _task_failures(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return sum(event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for event in history.events)


@pytest.mark.parametrize("flow", list(FLOWS))
@pytest.mark.parametrize("reply", [DEEP, DEEPER_THAN_ALLOWED], ids=["3000-deep", "past-the-bound"])
async def test_a_deep_reply_ends_the_flow_with_the_reason(time_worker: Client, model_server: FakeModelServer,
                                                          flow: str, reply: str) -> None:
    workflow, request, result_type, agent = FLOWS[flow]
    model_server.inject(Fault.reply(reply, agent=agent))
    handle = await _start(time_worker, workflow, request, result_type)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert f"nested deeper than {MAX_REPLY_DEPTH} levels" in str(failed.value.cause)
    assert await _task_failures(handle) == 0


async def test_a_lone_surrogate_in_the_deck_is_read_as_a_replacement_character(
        time_worker: Client, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.reply(SURROGATE_DECK, agent="presentation_composer"))
    handle = await _start(time_worker, SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT), SlidesResult)
    deck = (await handle.result()).deck
    assert (deck.title, deck.slides[0].title, deck.slides[0].bullets) == (
        "Tides \ufffd", "Why \ufffd", ["Predictable \ufffd\ufffd"])
    assert await _task_failures(handle) == 0


async def test_a_lone_surrogate_in_the_script_is_read_as_a_replacement_character(
        time_worker: Client, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.reply(SURROGATE_SCRIPT, agent="podcast_script_writer"))
    handle = await _start(time_worker, PODCAST_WORKFLOW, PodcastRequest(content=SAMPLE_REPORT), PodcastResult)
    assert [line.paragraph for line in (await handle.result()).script.lines] == ["Tides \ufffd rise."]
    assert await _task_failures(handle) == 0


@pytest.mark.parametrize("reply", [DEEP, SURROGATE_JUDGEMENT], ids=["3000-deep", "surrogate"])
async def test_a_hostile_judgement_leaves_an_answer(time_worker: Client, model_server: FakeModelServer,
                                                    reply: str) -> None:
    model_server.inject(Fault.reply(reply, agent="report_judge"))
    request = EvaluateRequest(content=SAMPLE_REPORT, report_style="news", use_llm=True)
    handle = await _start(time_worker, EVALUATOR_WORKFLOW, request, EvaluationResult)
    judged = (await handle.result()).llm_evaluation
    assert judged is not None
    if reply is DEEP:  # DeerFlow's answer to a reply it cannot parse
        assert judged.weaknesses == ["Evaluation parsing failed"]
    else:
        assert judged.scores["factual_accuracy"] == 9
        assert (judged.strengths, judged.weaknesses) == (["Clear \ufffd"], ["\ufffd"])
    assert await _task_failures(handle) == 0
