"""The planner's text becomes a validated plan, or a clear PlanParseError."""

from __future__ import annotations

import json

import pytest

from workflows.models import StepType
from workflows.plan_parsing import PlanParseError, parse_plan

PLAN = {
    "locale": "en-US",
    "has_enough_context": False,
    "thought": "Compare the options.",
    "title": "Heat pumps versus gas boilers",
    "steps": [
        {"need_search": True, "title": f"Step {n}", "description": "d", "step_type": "research"} for n in range(5)
    ],
}


def test_plain_json_is_parsed_and_steps_are_capped() -> None:
    plan = parse_plan(json.dumps(PLAN), max_steps=3, default_locale="zh-CN")
    assert plan.title == "Heat pumps versus gas boilers"
    assert [step.title for step in plan.steps] == ["Step 0", "Step 1", "Step 2"]
    assert plan.locale == "en-US"


def test_fenced_json_with_trailing_comma_and_single_quotes_is_repaired() -> None:
    text = "```json\n{'title': 'T', 'thought': 'x', 'steps': [{'title': 'a', 'step_type': 'Processing'},],}\n```"
    plan = parse_plan(text, max_steps=3, default_locale="zh-CN")
    assert plan.title == "T"
    assert plan.steps[0].step_type is StepType.PROCESSING
    assert plan.locale == "zh-CN"  # filled from the run when the model leaves it out


def test_truncated_json_is_repaired() -> None:
    text = json.dumps(PLAN)[:-40]
    plan = parse_plan(text, max_steps=3, default_locale="en-US")
    assert plan.title == PLAN["title"]


@pytest.mark.parametrize("text", ["I cannot produce a plan right now.", "", "[1, 2, 3]", '{"thought": "no title"}'])
def test_unusable_output_raises_a_clear_error(text: str) -> None:
    with pytest.raises(PlanParseError, match="planner"):
        parse_plan(text, max_steps=3, default_locale="en-US")


def test_unknown_step_type_is_rejected() -> None:
    bad = {**PLAN, "steps": [{"title": "x", "step_type": "dance"}]}
    with pytest.raises(PlanParseError, match="schema"):
        parse_plan(json.dumps(bad), max_steps=3, default_locale="en-US")
