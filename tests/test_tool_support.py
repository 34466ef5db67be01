"""With LLM_TOOL_MODE=native, a provider that ignores ``tools`` (llama-server with a chat template
without tool support) or refuses them fails the run saying so (issue #11), while a provider that
honours them keeps a genuine direct reply: the chat activity probes once per worker, endpoint and
model while its verdict lasts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import openai
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities, classify_provider_error
from activities.model.tool_support import refuses_tools
from cli.render import status_text
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault
from tests.support.runs import QUESTION, start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.calls.errors import failure_message
from workflows.contracts.chat import ChatMessage, ChatRequest
from workflows.contracts.research import Outcome
from workflows.contracts.status import Phase, RunStatus
from workflows.research.tools import HANDOFF_TO_PLANNER

VARS = {"CURRENT_TIME": "now", "locale": "en-US"}


def coordinator(question: str) -> ChatRequest:
    return ChatRequest(prompt="coordinator", prompt_vars=VARS, tools=[HANDOFF_TO_PLANNER],
                       messages=[ChatMessage(role="user", content=question)])


@pytest.fixture
def toolless() -> Iterator[FakeModelServer]:
    """A server that drops ``tools`` unread, as llama-server does for a template without them."""
    with FakeModelServer(ignore_tools=True) as server:
        yield server


def pointed_at(provider_env: dict[str, str], server: FakeModelServer) -> Settings:
    """Native tool mode only: in ``auto`` (the default) such a provider is served in JSON mode
    (tests/test_json_tool_mode.py)."""
    return settings_with(provider_env, OPENAI_BASE_URL=server.base_url, LLM_TOOL_MODE="native")


async def test_a_provider_that_ignores_tools_fails_the_coordinators_call_saying_so(
    provider_env: dict[str, str], toolless: FakeModelServer
) -> None:
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(ModelActivities(pointed_at(provider_env, toolless)).chat, coordinator(QUESTION))
    assert raised.value.type == "ModelToolsUnsupported" and raised.value.non_retryable
    assert "The model provider ignores tools" in raised.value.message and "--jinja" in raised.value.message
    question, probe = toolless.requests
    assert question["tools"][0]["function"]["name"] == "handoff_to_planner"
    assert probe["tool_choice"] == "required"  # what the probe asked, and the server dropped


async def test_a_provider_that_honours_tools_keeps_a_genuine_direct_reply_and_probes_once(
    worker_settings: Settings, model_server: FakeModelServer
) -> None:
    activities = ModelActivities(worker_settings)
    for greeting in ("Hello!", "Thanks!"):
        response = await ActivityEnvironment().run(activities.chat, coordinator(greeting))
        assert response.message.content and not response.message.tool_calls
    probes = [body for body in model_server.requests if body.get("tool_choice") == "required"]
    assert len(probes) == 1 and len(model_server.requests) == 3  # two replies, one probe (cached)


async def test_concurrent_calls_of_one_worker_share_one_probe(
    worker_settings: Settings, model_server: FakeModelServer
) -> None:
    """A fresh worker takes several calls at once: each asking its own probe would send the provider
    requests the model queue's rate limit never counted (tests/test_fleet_quota.py saw 6 extra)."""
    activities = ModelActivities(worker_settings)
    environment = ActivityEnvironment()
    await asyncio.gather(*(environment.run(activities.chat, coordinator(greeting))
                           for greeting in ("Hello!", "Thanks!", "Hi!", "Cheers!")))
    probes = [body for body in model_server.requests if body.get("tool_choice") == "required"]
    assert len(probes) == 1 and len(model_server.requests) == 5  # four replies, one probe


async def test_a_handoff_needs_no_probe(worker_settings: Settings, model_server: FakeModelServer) -> None:
    response = await ActivityEnvironment().run(ModelActivities(worker_settings).chat, coordinator(QUESTION))
    assert response.message.tool_calls[0].name == "handoff_to_planner"
    assert len(model_server.requests) == 1


@pytest.mark.parametrize("message", [
    "tools param requires --jinja flag",  # llama-server started without --jinja
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',  # vLLM
    "registry.ollama.ai/library/gemma:2b does not support tools",  # Ollama
])
def test_a_provider_refusing_tools_by_error_fails_at_once_saying_so(message: str) -> None:
    response = httpx.Response(500, json={"error": {"message": message}},
                              request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    error = classify_provider_error(openai.InternalServerError("x", response=response, body=response.json()))
    assert error.type == "ModelToolsUnsupported" and error.non_retryable  # a 500, but retrying cannot help
    assert message in error.message and "tool calling" in error.message


def test_other_errors_are_not_taken_for_a_tools_refusal() -> None:
    assert not refuses_tools("Model provider returned HTTP 500: upstream overloaded")
    assert not refuses_tools("the request exceeds the available context size, try increasing it")


async def test_a_run_on_a_provider_that_ignores_tools_fails_and_says_why_everywhere(
    worker_with: WorkerWith, provider_env: dict[str, str], toolless: FakeModelServer, model_server: FakeModelServer,
) -> None:
    async with worker_with(pointed_at(provider_env, toolless)) as client:
        handle = await start(client, auto_accept_plan=True)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        status = await handle.query("status", result_type=RunStatus)
    assert "The model provider ignores tools" in failure_message(failed.value.cause)
    assert status.phase is Phase.FAILED and status.outcome is Outcome.FAILED
    assert status.error is not None and status.error.startswith("The model provider ignores tools")
    assert "Error: The model provider ignores tools" in status_text(handle.id, status)
    assert not model_server.requests  # nothing went to the worker's usual provider


async def test_small_talk_on_a_provider_with_tools_is_still_a_direct_reply(time_worker: Client) -> None:
    handle = await start(time_worker, question="Hello!")
    result = await handle.result()
    assert result.outcome is Outcome.DIRECT_REPLY and result.report


async def test_llama_servers_refusal_of_tools_through_the_fake_fails_the_call_at_once(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.status(500, "tools param requires --jinja flag", agent="coordinator"))
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(ModelActivities(pointed_at(provider_env, model_server)).chat,
                                        coordinator(QUESTION))
    assert raised.value.type == "ModelToolsUnsupported" and raised.value.non_retryable
    assert "tools param requires --jinja flag" in raised.value.message
