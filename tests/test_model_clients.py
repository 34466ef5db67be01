"""The model turn keeps its clients: a warm worker's turn builds none, and each turn still sends its own cap.

Why it matters: building a ``ChatOpenAI`` re-reads the proxy environment, builds the openai SDK's
clients and serializes the model for langchain's callbacks, about 3 ms of every warm turn before its
request left (bench/README.md, issue #23). Kept wrongly, a client would send one agent's output cap
with another's turn, so the caps are checked where they arrive: at the provider.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model import clients
from activities.model.chat import ChatActivity
from activities.model.clients import KeptClients
from activities.model.llm import ModelActivities
from offline.model_server import FakeModelServer
from tests.support.chat_requests import COORDINATOR
from tests.support.settings import settings_with
from workflows.contracts.chat import ChatMessage, ChatRequest


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every client built from now on, as (tier, max_tokens)."""
    built: list[tuple[str, int]] = []
    real = clients.build_client

    def counting(settings: Any, tier: str, max_tokens: int) -> Any:
        built.append((tier, max_tokens))
        return real(settings, tier, max_tokens)

    monkeypatch.setattr(clients, "build_client", counting)
    return built


def planner_turn() -> ChatRequest:
    return ChatRequest(prompt="planner", prompt_vars={"CURRENT_TIME": "now", "locale": "en-US", "max_step_num": "2"},
                       messages=[ChatMessage(role="user", content="How do tides work?")], json_mode=True)


async def test_warm_turns_build_no_client_and_send_their_own_caps(
    provider_env: dict[str, str], model_server: FakeModelServer, builds: list[tuple[str, int]]
) -> None:
    settings = settings_with(provider_env, LLM_MAX_OUTPUT_TOKENS="700", LLM_AGENT_MAX_OUTPUT_TOKENS="planner=900")
    model = ModelActivities(settings)
    environment = ActivityEnvironment()
    for request in (COORDINATOR, planner_turn()):
        await environment.run(model.chat, request)
    built_cold = len(builds)
    for request in (COORDINATOR, planner_turn(), COORDINATOR):
        await environment.run(model.chat, request)

    assert built_cold >= 2 and len(builds) == built_cold  # the second round built nothing
    caps = [body.get("max_tokens", body.get("max_completion_tokens")) for body in model_server.requests]
    agent_caps = [cap for cap in caps if cap != clients.PROBE_MAX_TOKENS]
    assert agent_caps == [700, 900, 700, 900, 700]


def test_past_its_limit_the_oldest_client_is_dropped(
    provider_env: dict[str, str], builds: list[tuple[str, int]]
) -> None:
    kept = KeptClients(settings_with(provider_env), limit=2)
    first = kept.get("basic", 100)
    assert kept.get("basic", 100) is first
    second = kept.get("basic", 200)
    kept.get("reasoning", 100)  # a third key: (basic, 100) goes
    assert kept.get("basic", 200) is second and len(builds) == 3
    assert kept.get("basic", 100) is not first and len(builds) == 4


async def test_a_warmed_worker_builds_no_client_on_its_first_turns(
    provider_env: dict[str, str], model_server: FakeModelServer, builds: list[tuple[str, int]]
) -> None:
    """The worker's warm-up (``ModelActivities.warm``) builds the clients of every agent's cap and the probe's,
    for each tier, so a run's first turns build none (3 ms of CPU each on its critical path)."""
    settings = settings_with(provider_env, LLM_MAX_OUTPUT_TOKENS="700", LLM_AGENT_MAX_OUTPUT_TOKENS="planner=900")
    model = ModelActivities(settings)
    await model.warm()
    warmed = len(builds)
    environment = ActivityEnvironment()
    for request in (COORDINATOR, planner_turn()):
        await environment.run(model.chat, request)

    assert {cap for _, cap in builds} == {700, 900, clients.PROBE_MAX_TOKENS} and len(builds) == warmed


async def test_a_warm_up_the_settings_trip_leaves_the_worker_running(
    provider_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A failed warm-up would stop the worker (worker.py's warm-up task): the first turn meets the
    setting instead, failing with its own error."""
    chat = ChatActivity(settings_with(provider_env, OPENAI_BASE_URL="http://[::1/v1"))  # no valid port: InvalidURL
    await chat.warm()
    assert "The model turns' warm-up failed (InvalidURL)" in caplog.text
