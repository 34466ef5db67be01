"""Hostile model replies (issue #42 §2): the content flows on the time-skipping server, and the ``chat``
activity every agent's turn goes through, against the fake model server.

A reply a flow cannot use (a lone surrogate escape, JSON thousands of levels deep) must end the
run at once with the reason, or be read as far as it is usable; it must never fail a workflow task,
which the server retries until the request gives up (a 504 where a prompt 502 is due). A turn's
reply must leave the activity as a payload can carry it, or the turn is retried with the same reply.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from offline.model_server import FakeModelServer, Fault
from tests.support.chat_requests import COORDINATOR
from tests.support.runs import SAMPLE_REPORT, awaiting_review, start, wait_for
from tests.support.settings import READINGS, settings_with
from workflows.contracts.chat import ChatResponse
from workflows.contracts.evaluation import EVALUATOR_WORKFLOW, EvaluateRequest, EvaluationResult
from workflows.contracts.podcast import PODCAST_WORKFLOW, PodcastRequest, PodcastResult
from workflows.contracts.research import TASK_QUEUE
from workflows.contracts.slides import SLIDES_WORKFLOW, SlidesRequest, SlidesResult
from workflows.research.tools import ToolContext, run_tool_call
from workflows.text.reply_json import MAX_REPLY_DEPTH

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


# ---------------------------------------------------------------- the chat activity (every agent's turn)
# (Arguments that are no JSON object, a lone surrogate's and 5,000 levels' included: test_tool_arguments.py.)


def _carried(response: ChatResponse) -> ChatResponse:
    """The response as the activity's result payload carries it (what failed before: the encoding)."""
    return ChatResponse.model_validate_json(response.model_dump_json())


@pytest.mark.parametrize("reading", list(READINGS))
async def test_a_lone_surrogate_in_a_reply_is_a_replacement_character(
        provider_env: dict[str, str], model_server: FakeModelServer, reading: str) -> None:
    settings = settings_with(provider_env, **READINGS[reading])
    model_server.inject(Fault.reply("Tides \ud800 rise.", agent="coordinator"))
    answer = _carried(await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR))
    assert answer.message.content == "Tides \ufffd rise."


@pytest.mark.parametrize("reading", list(READINGS))
async def test_arguments_too_deep_to_carry_are_an_invalid_call_the_model_is_told_about(
        provider_env: dict[str, str], model_server: FakeModelServer, reading: str) -> None:
    """500 levels: JSON the parser reads, but deeper than the result's serializer goes."""
    settings = settings_with(provider_env, **READINGS[reading])
    model_server.inject(Fault.invalid_tool_args(arguments='{"research_topic": ' + "[" * 500 + "]" * 500 + "}"))
    [call] = _carried(await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)).message.tool_calls
    assert call.arguments == {} and call.invalid_arguments is not None
    told = await run_tool_call(call, (), ToolContext(max_search_results=3))
    assert told.startswith("Error: the arguments for handoff_to_planner were not valid JSON")


@pytest.mark.parametrize("reply", [DEEP, '{"action": "handoff_to_planner", "arguments": {"research_topic": '
                                   '"tides \\ud800", "locale": "en-US"}}'], ids=["3000-deep", "surrogate"])
async def test_json_tool_mode_reads_a_hostile_action(provider_env: dict[str, str], model_server: FakeModelServer,
                                                     reply: str) -> None:
    settings = settings_with(provider_env, LLM_TOOL_MODE="json", **READINGS["whole"])
    model_server.inject(Fault.reply(reply))
    message = _carried(await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)).message
    if reply is DEEP:  # no action it could carry: the reply as it stands
        assert (message.content, message.tool_calls) == (DEEP, [])
    else:
        assert message.tool_calls[0].arguments == {"research_topic": "tides \ufffd", "locale": "en-US"}


# ---------------------------------------------------------------- the planner

PLAN = ('{"locale": "en-US", "has_enough_context": false, "thought": "t", "title": "Tides%s", '
        '%s"steps": [{"need_search": true, "title": "How tides form", "description": "d", "step_type": "research"}]}')


@pytest.mark.parametrize("reply, title", [
    (PLAN % ("", " " * 60_000), "Tides"),  # a run of blanks: the old fence pattern took a minute per task
    ("```json\n" + PLAN % (" \\ud800", "") + "\n```", "Tides \ufffd"),
], ids=["60000-blanks", "surrogate"])
async def test_a_hostile_plan_is_read_in_bounded_work(time_worker: Client, model_server: FakeModelServer,
                                                      reply: str, title: str) -> None:
    model_server.inject(Fault.reply(reply, agent="planner"))
    handle = await start(time_worker)
    status = await wait_for(handle, awaiting_review)
    assert status.plan is not None and status.plan.title == title
    assert await _task_failures(handle) == 0


@pytest.mark.parametrize("reply", [
    DEEP, "[" * 100 + PLAN % ("", "") + "]" * 100,
    PLAN % ("", " " * 200_001) + ",",  # not JSON, so nothing mended it shorter
    "{" * 100_000,  # json-repair's time grows with nesting: 13 s (the chat activity leaves it unmended)
], ids=["3000-deep", "past-the-bound", "over-the-cap", "100000-braces"])
async def test_an_unusable_plan_is_asked_again(time_worker: Client, model_server: FakeModelServer,
                                               reply: str) -> None:
    model_server.inject(Fault.reply(reply, agent="planner"))
    handle = await start(time_worker)
    status = await wait_for(handle, awaiting_review)
    assert any("Planner output unusable, asking again" in event.message for event in status.events)
    assert status.plan is not None and status.plan.steps
    assert await _task_failures(handle) == 0
