"""Tool-call arguments as the model wrote them (issue #8, item 9; issue #42, item 8).

Through the real ``chat`` activity and ChatOpenAI against the fake model server, each reply read
whole and streamed (token previews stream every turn while a page watches): the same reply must give
the same calls, the same invalid ones and the same count either way (``activities/model/reply_calls.py``).
Arguments that are not a JSON object come back as an invalid call the agent loop answers, never
mended into a call the model did not make, and never failing the model turn.
"""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from config.settings import Settings
from offline.model_faults import INVALID_TOOL_ARGS
from offline.model_server import FakeModelServer, Fault
from tests.support.chat_requests import COORDINATOR
from tests.support.settings import READINGS, settings_with
from workflows.contracts.chat import ChatResponse, ToolCall
from workflows.research.tools import HANDOFF_TO_PLANNER, ToolContext, run_tool_call


@pytest.fixture(params=list(READINGS))
def reading(request: pytest.FixtureRequest, provider_env: dict[str, str]) -> Settings:
    return settings_with(provider_env, **READINGS[request.param])


async def chat(settings: Settings) -> ChatResponse:
    return await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)


async def test_each_reading_is_the_one_it_says(reading: Settings, model_server: FakeModelServer) -> None:
    await chat(reading)
    assert bool(model_server.requests[-1].get("stream")) is (reading.token_stream_url is not None)


@pytest.mark.parametrize("arguments", [INVALID_TOOL_ARGS, '{"query": "tides",', '["tides", "moon"]', '"tides"',
                                       "42", "true", "[" * 5_000 + "]" * 5_000, '{"query": "\\ud800"}'])
async def test_arguments_that_are_no_json_object_become_an_invalid_call_the_model_is_told_about(
    reading: Settings, model_server: FakeModelServer, arguments: str
) -> None:
    model_server.inject(Fault.invalid_tool_args(arguments=arguments))
    response = await chat(reading)

    [call] = response.message.tool_calls
    assert call.name == HANDOFF_TO_PLANNER.name and call.arguments == {}
    assert call.invalid_arguments == arguments
    response.model_dump_json()  # what history will hold: a lone surrogate stays escaped text
    told = await run_tool_call(call, (), ToolContext(max_search_results=3))
    assert told.startswith("Error: the arguments for handoff_to_planner were not valid JSON")
    assert "JSON object" in told and arguments[:200] in told


OBJECTS = [('{"research_topic": "tides", "locale": "en-US"}', {"research_topic": "tides", "locale": "en-US"}),
           ('{"research_topic": "line\none"}', {"research_topic": "line\none"}),  # a raw newline, as small models write
           ("null", {}), ("", {}), ("  ", {})]


@pytest.mark.parametrize(("arguments", "parsed"), OBJECTS)
async def test_an_object_empty_or_null_is_the_calls_arguments(
    reading: Settings, model_server: FakeModelServer, arguments: str, parsed: dict[str, str]
) -> None:
    model_server.inject(Fault.invalid_tool_args(arguments=arguments))
    response = await chat(reading)
    assert response.message.tool_calls == [ToolCall(id="call_1", name="handoff_to_planner", arguments=parsed)]


async def test_every_call_of_a_flood_comes_back_in_order(reading: Settings, model_server: FakeModelServer) -> None:
    """2,500 calls in one reply: the workflow caps how many run, and says how many were made."""
    model_server.inject(Fault.tool_call_flood(2_500))
    response = await chat(reading)
    calls = response.message.tool_calls
    assert [call.id for call in calls] == [f"call_flood_{index}" for index in range(2_500)]
    assert all(call.name == HANDOFF_TO_PLANNER.name and call.arguments["research_topic"] for call in calls)
