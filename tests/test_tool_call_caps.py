"""A model reply with thousands of tool calls (issue #8, item 6), on the time-skipping server.

The server refuses a run more than 2,000 pending activities and the run would be stuck for good.
The per-turn cap runs the first calls and tells the model the rest were dropped; the in-flight
cap bounds how many of the run's activities are pending at once. Whether the flood is read whole or
streamed (token previews stream every turn while a page watches the run), the same calls are capped
the same way (issue #42, item 8).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.run_config import RunConfigActivities
from config.settings import Settings
from offline.model_server import FakeModelServer, Fault
from tests.support.history_checks import most_pending, tool_batches
from tests.support.runs import start
from tests.support.settings import READINGS, settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.research import Outcome
from workflows.contracts.run_config import RunConfig

PER_TURN = 16
IN_FLIGHT = 4


@pytest.fixture(params=list(READINGS))
def caps(request: pytest.FixtureRequest, provider_env: dict[str, str]) -> Settings:
    return settings_with(provider_env, DEERFLOW_MAX_TOOL_CALLS_PER_TURN=str(PER_TURN),
                         DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT=str(IN_FLIGHT), **READINGS[request.param])


@pytest.fixture
async def capped(caps: Settings, worker_with: WorkerWith) -> AsyncIterator[Client]:
    """A worker with the small caps."""
    async with worker_with(caps) as client:
        yield client


async def test_a_flood_of_tool_calls_is_capped_and_the_run_completes(
    caps: Settings, capped: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.tool_call_flood(2_500, agent="researcher"))
    handle = await start(capped, question="How do tides work?", auto_accept_plan=True, max_step_num=1)
    result = await handle.result()

    assert result.outcome is Outcome.REPORT
    assert not model_server.pending_faults, "the flood was never sent"
    assert bool(model_server.requests_for("researcher")[0].get("stream")) is (caps.token_stream_url is not None)
    history = await handle.fetch_history()
    assert max(tool_batches(history)) == PER_TURN
    assert most_pending(history) <= IN_FLIGHT
    # The next turn carries the calls that ran, their results and one notice: not 2,500 messages
    # (whose preparation blocked the worker's loop past its heartbeats under load, for ever).
    next_turn = model_server.requests_for("researcher")[1]["messages"]
    [flooded] = [m for m in next_turn if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(flooded["tool_calls"]) == PER_TURN
    assert len([m for m in next_turn if m["role"] == "tool"]) == PER_TURN
    notice = next_turn[-1]["content"]
    assert "made 2500 tool calls" in notice and f"the other {2_500 - PER_TURN}" in notice


@pytest.mark.parametrize("name", ["DEERFLOW_MAX_TOOL_CALLS_PER_TURN", "DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT"])
@pytest.mark.parametrize("value", ["0", "2000"])
def test_the_caps_stay_well_below_the_servers_pending_activity_limit(name: str, value: str) -> None:
    with pytest.raises(ValidationError, match=name):
        Settings(**{name: value})


async def test_the_caps_reach_the_workflow_through_the_run_config(caps: Settings) -> None:
    config = await ActivityEnvironment().run(RunConfigActivities(caps).load_run_config)
    assert (config.max_tool_calls_per_turn, config.max_activities_in_flight) == (PER_TURN, IN_FLIGHT)
    defaults = Settings()
    assert (defaults.max_tool_calls_per_turn, defaults.max_activities_in_flight) == (16, 32)
    # Runs recorded before the caps have no such fields: no cap, as they ran then.
    assert RunConfig.model_validate({"agent_recursion_limit": 25}).max_tool_calls_per_turn is None
