"""Every model call a run made counts in its usage, whatever the outcome (issue #24, item 4).

On llama-server, SmolLM2-135M answered one turn with empty completions until the activity's retries
ran out: six calls the run spent and its usage did not show, because a failed attempt's calls died
with it. Now an empty completion is asked again inside the turn, a failure carries the calls it made
(the failed one included), and a retried attempt hands its calls on to the next attempt.
"""

from __future__ import annotations

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model.llm import EMPTY_COMPLETION_ASKS, ModelActivities
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault
from tests.support.chat_requests import COORDINATOR
from tests.support.runs import start
from workflows.contracts.research import Outcome


async def test_an_empty_completion_is_asked_again_and_every_ask_counts(
    worker_settings: Settings, model_server: FakeModelServer
) -> None:
    model_server.inject(*[Fault.empty(agent="coordinator")] * (EMPTY_COMPLETION_ASKS - 1))
    response = await ActivityEnvironment().run(ModelActivities(worker_settings).chat, COORDINATOR)
    assert response.message.tool_calls[0].name == "handoff_to_planner"
    assert response.usage.llm_calls == len(model_server.requests) == EMPTY_COMPLETION_ASKS


async def test_a_turn_that_stays_empty_fails_for_good_with_every_ask_counted(
    worker_settings: Settings, model_server: FakeModelServer
) -> None:
    model_server.inject(*[Fault.empty(agent="coordinator")] * EMPTY_COMPLETION_ASKS)
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(ModelActivities(worker_settings).chat, COORDINATOR)
    assert raised.value.type == "ModelEmptyCompletion" and raised.value.non_retryable
    (spent,) = raised.value.details
    assert spent.llm_calls == len(model_server.requests) == EMPTY_COMPLETION_ASKS


async def test_a_call_the_provider_refused_counts(worker_settings: Settings, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.status(400, "bad request", agent="coordinator"))
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(ModelActivities(worker_settings).chat, COORDINATOR)
    (spent,) = raised.value.details
    assert raised.value.type == "ModelProviderError" and spent.llm_calls == 1


async def test_the_calls_of_retried_attempts_count_in_the_runs_usage(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.status(503, agent="planner"), Fault.empty(agent="reporter"),
                        Fault.status(500, agent="reporter"))
    result = await (await start(time_worker, auto_accept_plan=True, max_step_num=1)).result()
    assert result.outcome is Outcome.REPORT and not model_server.pending_faults
    assert result.usage.llm_calls == len(model_server.requests)  # the failed attempts' calls too
