"""Tool-call arguments that are JSON but not an object (issue #8, item 9).

Through the real ``chat`` activity and ChatOpenAI against the fake model server: such a call
must come back as an invalid tool call the agent loop answers, not fail the model turn. A reply
streamed for token previews is assembled from chunks by another langchain path, which must read
the same arguments the same way.
"""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault
from tests.support.chat_requests import COORDINATOR
from tests.support.settings import settings_with
from workflows.models import ToolCall
from workflows.tools import HANDOFF_TO_PLANNER, ToolContext, run_tool_call


@pytest.mark.parametrize("arguments", ['["tides", "moon"]', '"tides"', "42", "true"])
async def test_non_object_arguments_become_an_invalid_call_the_model_is_told_about(
    worker_settings: Settings, model_server: FakeModelServer, arguments: str
) -> None:
    model_server.inject(Fault.invalid_tool_args(arguments=arguments))
    response = await ActivityEnvironment().run(ModelActivities(worker_settings).chat, COORDINATOR)

    [call] = response.message.tool_calls
    assert call.name == HANDOFF_TO_PLANNER.name and call.arguments == {}
    assert call.invalid_arguments == arguments
    told = await run_tool_call(call, (), ToolContext(max_search_results=3))
    assert told.startswith("Error: the arguments for handoff_to_planner were not valid JSON")
    assert "JSON object" in told and arguments in told


@pytest.mark.parametrize("streamed", [False, True])
async def test_object_and_null_arguments_still_parse(provider_env: dict[str, str], model_server: FakeModelServer,
                                                     streamed: bool) -> None:
    # Streamed: previews go to a sink nobody listens on (loopback's discard port): the reply is unchanged.
    sink = {"DEERFLOW_TOKEN_STREAM_URL": "http://127.0.0.1:9/internal/token-stream",
            "DEERFLOW_TOKEN_STREAM_TOKEN": "t" * 24} if streamed else {"DEERFLOW_TOKEN_STREAM": "false"}
    settings: Settings = settings_with(provider_env, **sink)
    model_server.inject(Fault.invalid_tool_args(arguments='{"research_topic": "tides", "locale": "en-US"}'),
                        Fault.invalid_tool_args(arguments="null"))
    first = await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)
    second = await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)
    assert first.message.tool_calls[0].arguments == {"research_topic": "tides", "locale": "en-US"}
    assert second.message.tool_calls[0] == ToolCall(id="call_1", name="handoff_to_planner", arguments={})
