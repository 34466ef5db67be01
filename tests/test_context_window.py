"""The context window from settings or the provider, and a context-overflow 400 re-trimmed once
(issue #11), against the fake model server's imitation of llama-server (``n_ctx``).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model.context_window import ContextWindows, Overflow, overflow_of, retrim_limit
from activities.model.llm import ModelActivities
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault, requested_output_cap
from tests.support.settings import settings_with
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse

VARS = {"CURRENT_TIME": "now", "locale": "en-US", "report_style": "academic", "max_step_num": "2"}
PAGE = "Tidal forces raise two bulges of water on opposite sides of the Earth. " * 600  # ~10k tokens


def reporter(text: str = PAGE) -> ChatRequest:
    return ChatRequest(prompt="reporter", prompt_vars=VARS,
                       messages=[ChatMessage(role="user", content="# Research Requirements\n\nTides"),
                                 ChatMessage(role="user", content=text)])


@pytest.fixture
def small_window() -> Iterator[FakeModelServer]:
    """A llama-server started with ``-c 4000``: it says so in /v1/models and refuses longer prompts."""
    with FakeModelServer(n_ctx=4000) as server:
        yield server


def pointed_at(provider_env: dict[str, str], server: FakeModelServer, **overrides: str) -> Settings:
    return settings_with(provider_env, OPENAI_BASE_URL=server.base_url, **overrides)


async def run_chat(activities: ModelActivities, request: ChatRequest) -> ChatResponse:
    return await ActivityEnvironment().run(activities.chat, request)


async def test_the_window_the_provider_reports_is_used_from_the_first_call(
    provider_env: dict[str, str], small_window: FakeModelServer
) -> None:
    response = await run_chat(ModelActivities(pointed_at(provider_env, small_window)), reporter())
    assert response.message.content and len(small_window.requests) == 1  # trimmed up front, never refused
    assert requested_output_cap(small_window.requests[0]) == 1000 == response.output_cap  # a quarter of 4000


async def test_the_reported_window_is_read_once_per_worker(provider_env: dict[str, str]) -> None:
    windows = ContextWindows()
    with FakeModelServer(n_ctx=6000) as server:
        settings = pointed_at(provider_env, server)
        assert await windows.window(settings, "deerflow-offline-demo") == 6000
    assert await windows.window(settings, "deerflow-offline-demo") == 6000  # the server is gone: cached


async def test_a_window_asked_at_start_serves_the_first_turn(
    provider_env: dict[str, str], small_window: FakeModelServer
) -> None:
    """The worker's warm-up asks each tier's provider for its window (``ModelActivities.warm``), so a
    run's first turn does not wait for that round trip: it budgets with the answer, asking nothing."""
    activities = ModelActivities(pointed_at(provider_env, small_window))
    await activities.warm()
    small_window.n_ctx = 8000  # asked again, the server would now say 8000
    response = await run_chat(activities, reporter())
    assert response.output_cap == 1000 == requested_output_cap(small_window.requests[0])  # a quarter of 4000


async def test_a_provider_not_up_at_start_is_asked_by_the_first_turn(
    provider_env: dict[str, str], unused_tcp_port: int
) -> None:
    """Only an answer is kept at start: a provider still starting (docker compose) or refusing the list is
    asked again by the first turn, not taken for one without a window for the worker's life."""
    windows = ContextWindows()
    settings = settings_with(provider_env, OPENAI_BASE_URL=f"http://127.0.0.1:{unused_tcp_port}/v1")
    assert await windows.ask_ahead(settings, "basic") == 32_000  # refused: the name's window, for now
    with FakeModelServer(port=unused_tcp_port, n_ctx=6000):
        assert await windows.window(settings, "deerflow-offline-demo") == 6000


async def test_token_limit_wins_and_an_overflow_re_trims_once_to_the_window_the_error_names(
    provider_env: dict[str, str], small_window: FakeModelServer
) -> None:
    activities = ModelActivities(pointed_at(provider_env, small_window, TOKEN_LIMIT="32000"))
    response = await run_chat(activities, reporter())
    assert response.message.content
    refused, retried = small_window.requests
    assert len(str(retried["messages"])) < len(str(refused["messages"])) // 2
    assert requested_output_cap(retried) <= 1000
    await run_chat(activities, reporter())  # TOKEN_LIMIT stays the operator's word: the next call re-trims again
    assert len(small_window.requests) == 4


async def test_a_learned_window_serves_the_workers_later_calls(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    activities = ModelActivities(settings_with(provider_env))
    model_server.inject(Fault.context_overflow(4000, agent="reporter"))
    await run_chat(activities, reporter())
    await run_chat(activities, reporter())
    assert len(model_server.requests) == 3  # the second call was trimmed to 4,000 up front


async def test_a_second_overflow_fails_at_once_naming_token_limit(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.context_overflow(4000), Fault.context_overflow(4000))
    with pytest.raises(ApplicationError) as raised:
        await run_chat(ModelActivities(settings_with(provider_env)), reporter())
    assert raised.value.type == "ModelContextExceeded" and raised.value.non_retryable
    assert "TOKEN_LIMIT" in raised.value.message and "exceeds the available context size" in raised.value.message
    assert len(model_server.requests) == 2


async def test_an_overflow_of_the_planner_keeps_its_json_schema(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    """An overflow is a 400 as a refused response_format is: it must not fall back to json_object."""
    model_server.inject(Fault.context_overflow(4000, agent="planner"))
    planner = ChatRequest(prompt="planner", prompt_vars=VARS, json_mode=True, response_schema="plan",
                          messages=[ChatMessage(role="user", content="How do tides work?\n\n" + PAGE)])
    await run_chat(ModelActivities(settings_with(provider_env)), planner)
    assert [body["response_format"]["type"] for body in model_server.requests] == ["json_schema", "json_schema"]


def bad_request(body: dict) -> openai.BadRequestError:
    response = httpx.Response(400, json=body, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    return openai.BadRequestError("Error code: 400", response=response, body=body)


def test_openai_and_vllm_overflows_name_their_window_in_words() -> None:
    overflow = overflow_of(bad_request({"error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                   "9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "code": "context_length_exceeded"}}))
    assert overflow is not None and (overflow.window, overflow.prompt_tokens) == (8192, 9000)
    # The offline estimate said 8,000 where the provider counted 9,000: trim below the window by as much.
    assert retrim_limit(overflow, 8000) == 8192 * 8000 // 9000
    assert overflow_of(bad_request({"error": {"message": "Invalid value for 'temperature'"}})) is None
    assert retrim_limit(Overflow("too long", window=None, prompt_tokens=None), 100) is None
