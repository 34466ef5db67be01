"""The plan schema's bounds follow the planner's output cap (issue #24): a small model looping inside
the plan's strings stops at the schema, and the whole plan still fits the cap and parses.

Measured on llama-server with SmolLM2-135M: a fixed 1,500-character "thought" (~400 tokens) was
cut at a 256-token planner cap twice, and the run failed with no usable plan.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from activities.model.json_tools import CHARS_PER_TOKEN
from activities.model.plan_schema import PLAN_STRING_CHARS, STEP_STRING_CHARS, plan_json_schema
from offline.model_server import FakeModelServer, Fault
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.plan import StepType
from workflows.contracts.research import Outcome
from workflows.research.plan_parsing import parse_plan


def plan_at_its_bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """The longest plan ``schema`` allows: every string, array and index at its bound."""
    top, step = schema["properties"], schema["$defs"]["Step"]["properties"]
    steps = schema["properties"]["steps"]["maxItems"]
    depends_on = step["depends_on"]["anyOf"][0]
    return {"locale": "x" * top["locale"]["maxLength"], "has_enough_context": False,
            "thought": "t" * top["thought"]["maxLength"], "title": "p" * top["title"]["maxLength"],
            "steps": [{"need_search": False, "title": "s" * step["title"]["maxLength"],
                       "description": "d" * step["description"]["maxLength"],
                       "step_type": max(StepType, key=len).value,
                       "depends_on": [depends_on["items"]["maximum"]] * depends_on["maxItems"]}] * steps}


@pytest.mark.parametrize("cap", [128, 256, 512, 1024, 4096, 16384])
@pytest.mark.parametrize("max_steps", [1, 2, 3, 7, 20])
def test_the_longest_plan_the_schema_allows_fits_the_output_cap_and_parses(cap: int, max_steps: int) -> None:
    schema = plan_json_schema(cap, max_steps)
    longest = json.dumps(plan_at_its_bounds(schema))
    assert len(longest) <= cap * CHARS_PER_TOKEN
    plan = parse_plan(longest, max_steps, "en-US")
    assert 1 <= len(plan.steps) == schema["properties"]["steps"]["maxItems"] <= max_steps


def test_a_large_cap_keeps_every_bound_a_plan_needs() -> None:
    schema = plan_json_schema(4096, 3)
    step = schema["$defs"]["Step"]["properties"]
    assert {name: schema["properties"][name]["maxLength"] for name in PLAN_STRING_CHARS} == PLAN_STRING_CHARS
    assert {name: step[name]["maxLength"] for name in STEP_STRING_CHARS} == STEP_STRING_CHARS
    assert schema["properties"]["steps"]["maxItems"] == 3


def test_a_small_cap_plans_fewer_steps_rather_than_titles_that_say_nothing() -> None:
    schema = plan_json_schema(256, 3)
    assert schema["properties"]["steps"]["maxItems"] == 1
    assert schema["$defs"]["Step"]["properties"]["title"]["maxLength"] >= 24


async def test_a_planner_looping_inside_its_plan_stops_at_the_schema_within_a_small_cap(
    worker_with: WorkerWith, provider_env: dict[str, str], model_server: FakeModelServer,
) -> None:
    """Every string looped to its bound, as SmolLM2 looped in "thought": the plan fits 256 tokens
    and is used at once. With bounds that ignore the cap it was cut at the cap, re-asked and cut
    again, and the run failed (run E in docs/local-models.md)."""
    model_server.inject(Fault.looping_plan(), Fault.looping_plan())
    settings = settings_with(provider_env, LLM_AGENT_MAX_OUTPUT_TOKENS="planner=256")
    async with worker_with(settings) as client:
        result = await (await start(client, auto_accept_plan=True, max_step_num=2)).result()
    sent = model_server.requests_for("planner")[0]["response_format"]["json_schema"]["schema"]
    assert result.outcome is Outcome.REPORT and result.plan is not None
    assert len(model_server.requests_for("planner")) == 1  # no cut, no re-ask
    assert len(result.plan.thought) == sent["properties"]["thought"]["maxLength"]
    assert len(result.plan.steps) == sent["properties"]["steps"]["maxItems"] == 1
