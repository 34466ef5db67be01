"""The ``chat`` activity through the real ChatOpenAI client against the fake model server.

The point is the error sorting: what Temporal may retry, what must fail at once, and how long a
rate-limited call waits.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from activities.model.prompts import render_prompt
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault
from tests.support.chat_requests import COORDINATOR
from tests.support.settings import settings_with
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ToolCall, ToolSpec
from workflows.research.tools import TOOLS


async def run_chat(settings: Settings, request: ChatRequest) -> ChatResponse:
    return await ActivityEnvironment().run(ModelActivities(settings).chat, request)


async def test_tool_call_and_usage_come_back(worker_settings: Settings, model_server: FakeModelServer) -> None:
    response = await run_chat(worker_settings, COORDINATOR)
    assert response.message.tool_calls[0].name == "handoff_to_planner"
    assert response.message.tool_calls[0].arguments["locale"] == "en-US"
    assert response.usage.llm_calls == 1 and response.usage.total_tokens > 0
    system = model_server.requests[-1]["messages"][0]["content"]
    assert system == render_prompt("coordinator", COORDINATOR.prompt_vars) and "Locale: en-US" in system


async def test_json_mode_reaches_the_provider(worker_settings: Settings, model_server: FakeModelServer) -> None:
    request = ChatRequest(prompt="planner", prompt_vars={"CURRENT_TIME": "now", "locale": "en-US", "max_step_num": "2"},
                          messages=[ChatMessage(role="user", content="How do tides work?")], json_mode=True)
    response = await run_chat(worker_settings, request)
    assert model_server.requests[-1]["response_format"] == {"type": "json_object"}
    assert "at most 2 steps" in model_server.requests[-1]["messages"][0]["content"]
    assert '"steps"' in response.message.content


async def test_tool_messages_reach_the_provider(worker_settings: Settings, model_server: FakeModelServer) -> None:
    call = ToolCall(id="call_1", name="web_search", arguments={"query": "tides"})
    request = ChatRequest(
        prompt="researcher", prompt_vars={"CURRENT_TIME": "now", "locale": "en-US", "tool_guidance": "-"},
        messages=[ChatMessage(role="user", content="# Current Step\n\n## Title\n\nTides\n\n## Description\n\nx"),
                  ChatMessage(role="assistant", tool_calls=[call]),
                  ChatMessage(role="tool", tool_call_id="call_1", name="web_search",
                              content='[{"title": "Tides", "url": "https://t.example/tides", "content": "Moon."}]')],
        tools=[TOOLS["web_search"].spec],
    )
    response = await run_chat(worker_settings, request)
    sent = model_server.requests[0]  # then a probe: an answer without a call, in LLM_TOOL_MODE=auto
    assert sent["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": request.messages[2].content}
    assert "https://t.example/tides" in response.message.content


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
async def test_transient_statuses_are_retryable(
    worker_settings: Settings, model_server: FakeModelServer, status: int
) -> None:
    model_server.inject(Fault.status(status))
    with pytest.raises(ApplicationError) as raised:
        await run_chat(worker_settings, COORDINATOR)
    assert not raised.value.non_retryable
    assert f"HTTP {status}" in raised.value.message


async def test_429_waits_as_long_as_the_provider_asks(worker_settings: Settings, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.status(429, "Rate limit reached", retry_after=7))
    with pytest.raises(ApplicationError) as raised:
        await run_chat(worker_settings, COORDINATOR)
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay == timedelta(seconds=7)
    assert "Rate limit reached" in raised.value.message


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_fail_at_once_with_the_providers_message(
    worker_settings: Settings, model_server: FakeModelServer, status: int
) -> None:
    model_server.inject(Fault.status(status, f"provider says no ({status})"))
    with pytest.raises(ApplicationError) as raised:
        await run_chat(worker_settings, COORDINATOR)
    assert raised.value.non_retryable
    assert raised.value.type == "ModelProviderError"
    assert f"provider says no ({status})" in raised.value.message


async def test_read_timeout_is_retryable(model_server: FakeModelServer, provider_env: dict[str, str]) -> None:
    model_server.inject(Fault.timeout(3))
    with pytest.raises(ApplicationError) as raised:
        await run_chat(settings_with(provider_env, LLM_REQUEST_TIMEOUT="0.5"), COORDINATOR)
    assert not raised.value.non_retryable
    assert "timed out" in raised.value.message


async def test_a_truncated_response_is_retryable(worker_settings: Settings, model_server: FakeModelServer) -> None:
    """(An empty completion is asked again within the turn: tests/test_usage_accounting.py.)"""
    model_server.inject(Fault.truncated())
    with pytest.raises(ApplicationError) as raised:
        await run_chat(worker_settings, COORDINATOR)
    assert not raised.value.non_retryable


async def test_invalid_tool_arguments_are_kept_for_the_agent_loop(
    worker_settings: Settings, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.invalid_tool_args())
    response = await run_chat(worker_settings, COORDINATOR)
    call = response.message.tool_calls[0]
    assert call.invalid_arguments is not None and call.arguments == {}


async def test_a_missing_prompt_variable_is_a_final_error(worker_settings: Settings) -> None:
    with pytest.raises(ApplicationError) as raised:
        await run_chat(worker_settings, ChatRequest(prompt="reporter", prompt_vars={"CURRENT_TIME": "now"}))
    assert raised.value.non_retryable and "needs variable" in raised.value.message


def test_tool_specs_are_valid_openai_function_schemas() -> None:
    for definition in TOOLS.values():
        spec: ToolSpec = definition.spec
        assert spec.parameters["type"] == "object"
        assert set(spec.parameters["required"]) <= set(spec.parameters["properties"])
