"""Output caps and structured plans in the ``chat`` activity, against the fake model server's
imitation of a small model on a real server (issue #11): it loops until ``max_tokens``, or for
ever when none is sent; it refuses or ignores a JSON schema.
"""

from __future__ import annotations

import time

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault, requested_output_cap
from tests.support.settings import settings_with
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse
from workflows.research.plan_parsing import parse_plan

VARS = {"CURRENT_TIME": "now", "locale": "en-US", "max_step_num": "2", "report_style": "academic"}
PLANNER = ChatRequest(prompt="planner", prompt_vars=VARS, json_mode=True, response_schema="plan",
                      messages=[ChatMessage(role="user", content="How do tides work?")])
REPORTER = ChatRequest(prompt="reporter", prompt_vars=VARS,
                       messages=[ChatMessage(role="user", content="# Research Requirements\n\nTides")])


async def run_chat(settings: Settings, request: ChatRequest) -> ChatResponse:
    return await ActivityEnvironment().run(ModelActivities(settings).chat, request)


async def test_every_call_sends_its_agents_output_cap(provider_env: dict[str, str],
                                                      model_server: FakeModelServer) -> None:
    settings = settings_with(provider_env, LLM_MAX_OUTPUT_TOKENS="1000",
                             LLM_AGENT_MAX_OUTPUT_TOKENS="reporter=3000")
    await run_chat(settings, PLANNER)
    await run_chat(settings, REPORTER)
    assert [requested_output_cap(body) for body in model_server.requests[-2:]] == [1000, 3000]


async def test_the_cap_stays_within_the_context_windows_reply_reserve(provider_env: dict[str, str],
                                                                      model_server: FakeModelServer) -> None:
    settings = settings_with(provider_env, TOKEN_LIMIT="4000", LLM_MAX_OUTPUT_TOKENS="100000")
    response = await run_chat(settings, PLANNER)
    assert requested_output_cap(model_server.requests[-1]) == 1000 == response.output_cap  # a quarter of the window


async def test_a_looping_model_stops_at_the_cap_and_comes_back_marked_not_failed(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.loop(agent="reporter"))
    settings = settings_with(provider_env, LLM_AGENT_MAX_OUTPUT_TOKENS="reporter=64")
    started = time.monotonic()
    response = await run_chat(settings, REPORTER)
    assert time.monotonic() - started < 3
    assert response.truncated and response.finish_reason == "length" and response.output_cap == 64
    assert response.message.content.startswith("Solar power is a clean source of energy.")
    assert len(model_server.requests_for("reporter")) == 1  # kept, not retried


async def test_without_a_cap_the_fake_loops_until_the_request_timeout(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    """What every call did before: the fake keeps the real server's behaviour for such a client."""
    import openai

    model_server.inject(Fault.loop())
    client = openai.AsyncOpenAI(base_url=model_server.base_url, api_key="x", timeout=0.5, max_retries=0)
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


async def test_the_planner_sends_the_plans_json_schema(worker_settings: Settings,
                                                       model_server: FakeModelServer) -> None:
    response = await run_chat(worker_settings, PLANNER)
    sent = model_server.requests[-1]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "plan"
    schema = sent["json_schema"]["schema"]
    assert "title" in schema["required"] and schema["properties"]["steps"]["minItems"] == 1
    assert "execution_res" not in schema["$defs"]["Step"]["properties"]
    assert parse_plan(response.message.content, 2, "en-US").steps


@pytest.mark.parametrize("status", [400, 422])
async def test_a_provider_that_refuses_the_schema_gets_json_object(
    worker_settings: Settings, model_server: FakeModelServer, status: int
) -> None:
    model_server.inject(Fault.status(status, "response_format json_schema is not supported", agent="planner"))
    response = await run_chat(worker_settings, PLANNER)
    formats = [body["response_format"]["type"] for body in model_server.requests_for("planner")[-2:]]
    assert formats == ["json_schema", "json_object"]
    assert parse_plan(response.message.content, 2, "en-US").steps


async def test_a_second_400_is_the_providers_answer(worker_settings: Settings,
                                                    model_server: FakeModelServer) -> None:
    model_server.inject(*[Fault.status(400, "bad request", agent="planner") for _ in range(2)])
    with pytest.raises(ApplicationError, match="HTTP 400: bad request") as raised:
        await run_chat(worker_settings, PLANNER)
    assert raised.value.non_retryable


async def test_json_object_only_when_the_operator_says_so(provider_env: dict[str, str],
                                                          model_server: FakeModelServer) -> None:
    await run_chat(settings_with(provider_env, LLM_STRUCTURED_OUTPUT="json_object"), PLANNER)
    assert model_server.requests[-1]["response_format"] == {"type": "json_object"}


def test_agent_caps_are_read_from_the_environment(provider_env: dict[str, str]) -> None:
    settings = settings_with(provider_env, LLM_MAX_OUTPUT_TOKENS="2000", LLM_AGENT_MAX_OUTPUT_TOKENS="planner=512")
    assert (settings.max_output_tokens("planner"), settings.max_output_tokens("researcher")) == (512, 2000)
    with pytest.raises(ValueError, match="agent=tokens"):
        settings_with(provider_env, LLM_AGENT_MAX_OUTPUT_TOKENS="planner")
    with pytest.raises(ValueError, match="at least 16"):
        settings_with(provider_env, LLM_AGENT_MAX_OUTPUT_TOKENS="planner=0")


async def test_a_json_reply_cut_at_the_cap_comes_back_for_repair_not_as_an_error(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    """OpenAI's SDK raises on a structured reply that hit its cap; the activity keeps it instead."""
    model_server.inject(Fault.loop(agent="planner"))
    response = await run_chat(settings_with(provider_env, LLM_AGENT_MAX_OUTPUT_TOKENS="planner=32"), PLANNER)
    assert response.truncated and response.output_cap == 32
    assert model_server.requests[-1]["response_format"]["type"] == "json_schema"
