"""The planner's text becomes a validated plan, or a clear PlanParseError.

A reply that is not quite JSON is mended by the chat activity (``mended_plan``) and then read strictly
by the workflow; runs recorded before that mended it in the workflow (``repair=True``, on replay).
"""

from __future__ import annotations

import json

import pytest

from activities.model.plan_schema import mended_plan
from workflows.contracts.plan import StepType
from workflows.research.plan_parsing import PlanParseError, parse_plan

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


@pytest.mark.parametrize("mended", [True, False], ids=["by-the-activity", "in-the-workflow-before"])
def test_fenced_json_with_trailing_comma_and_single_quotes_is_repaired(mended: bool) -> None:
    text = "```json\n{'title': 'T', 'thought': 'x', 'steps': [{'title': 'a', 'step_type': 'Processing'},],}\n```"
    plan = parse_plan(mended_plan(text), 3, "zh-CN") if mended else parse_plan(text, 3, "zh-CN", repair=True)
    assert plan.title == "T"
    assert plan.steps[0].step_type is StepType.PROCESSING
    assert plan.locale == "zh-CN"  # filled from the run when the model leaves it out


@pytest.mark.parametrize("mended", [True, False], ids=["by-the-activity", "in-the-workflow-before"])
def test_truncated_json_is_repaired(mended: bool) -> None:
    text = json.dumps(PLAN)[:-40]
    plan = parse_plan(mended_plan(text), 3, "en-US") if mended else parse_plan(text, 3, "en-US", repair=True)
    assert plan.title == PLAN["title"]


def test_the_workflow_alone_reads_strictly() -> None:
    """json-repair never runs in workflow code now: a reply it would have mended is refused there."""
    with pytest.raises(PlanParseError, match="not a JSON plan object"):
        parse_plan(json.dumps(PLAN)[:-40], max_steps=3, default_locale="en-US")


@pytest.mark.parametrize("reply", ["{" * 100_000, "(" * 100_000, '{"title": "' + "{a:1," * 10_000],
                         ids=["braces", "parens", "nested-in-a-string"])
def test_a_reply_too_deep_to_mend_in_bounded_time_is_left_as_it_was(reply: str) -> None:
    """json-repair's time grows with nesting (13 s for the braces); such a reply goes unmended."""
    assert mended_plan(reply) == reply


@pytest.mark.parametrize("text", ["I cannot produce a plan right now.", "", "[1, 2, 3]", '{"thought": "no title"}'])
def test_unusable_output_raises_a_clear_error(text: str) -> None:
    with pytest.raises(PlanParseError, match="planner"):
        parse_plan(text, max_steps=3, default_locale="en-US")


def test_unknown_step_type_is_rejected() -> None:
    bad = {**PLAN, "steps": [{"title": "x", "step_type": "dance"}]}
    with pytest.raises(PlanParseError, match="schema"):
        parse_plan(json.dumps(bad), max_steps=3, default_locale="en-US")
