"""The schema the planner's reply must follow (``response_format: json_schema``), sized to its output cap,
and the reply mended into the JSON it meant (``mended_plan``), for the workflow to read strictly.

A provider that enforces schemas (llama.cpp turns one into a grammar) makes a model close a string at
its ``maxLength`` and an array at its ``maxItems``. A small model loops inside a string (SmolLM2-135M
on llama-server wrote "thought" until the output cap), so the bounds must be small enough that the
whole plan, every string and array at its bound, still fits the planner's output cap: then a looping
model stops at the schema and the plan parses, instead of being cut at the cap and failing (issue #24:
a fixed 1,500-character "thought", ~400 tokens, was cut at a 256-token cap twice and the run failed).

The bounds are those a plan needs at most (a plan under a large cap keeps them all), shrunk in
proportion when the cap cannot hold them, and the steps are at most the planner's ``max_step_num``
(the workflow keeps no more), fewer when a cap cannot give each step a usable title.
"""

from __future__ import annotations

import json
from typing import Any

from activities.model.json_tools import CHARS_PER_TOKEN
from activities.model.lenient_json import Unrepairable, lenient_json
from workflows.contracts.chat import ChatRequest
from workflows.contracts.plan import Plan, Step, StepType
from workflows.research.plan_parsing import without_fences

# The most a plan needs of each string: far above a good plan's, kept under a large output cap.
PLAN_STRING_CHARS = {"thought": 1_500, "title": 200}
STEP_STRING_CHARS = {"title": 200, "description": 1_000}
LOCALE_CHARS = 16  # "en-US", "zh-CN": never shrunk, a shorter locale is not one
MAX_PLAN_STEPS = 20  # ``ResearchRequest.max_step_num``'s own limit
# A step title shorter than this says nothing: a cap that cannot give each step one plans fewer steps.
MIN_STEP_TITLE_CHARS = 24


def planner_schema(request: ChatRequest, output_cap: int) -> dict[str, Any]:
    """The plan's schema for a planner turn capped at ``output_cap`` tokens, with no more steps than
    its prompt's ``max_step_num`` asks for (the workflow keeps no more), so what a small cap holds
    goes to those."""
    steps = request.prompt_vars.get("max_step_num", "")
    return plan_json_schema(output_cap, int(steps) if steps.isdigit() else MAX_PLAN_STEPS)


def plan_json_schema(output_cap: int, max_steps: int = MAX_PLAN_STEPS) -> dict[str, Any]:
    """The ``Plan`` model's schema, less what the workflow fills in (``execution_res``), with at least
    one step, so a provider that enforces schemas cannot return a plan without a title or steps, and
    every string and array bounded so the whole plan fits ``output_cap`` tokens."""
    steps, scale = _fit(output_cap * CHARS_PER_TOKEN, max(1, min(max_steps, MAX_PLAN_STEPS)))
    schema = Plan.model_json_schema()
    step = schema["$defs"]["Step"]
    step["properties"].pop("execution_res", None)
    schema["properties"]["locale"]["maxLength"] = LOCALE_CHARS
    for properties, bounds in ((schema["properties"], PLAN_STRING_CHARS), (step["properties"], STEP_STRING_CHARS)):
        for name, chars in bounds.items():
            properties[name]["maxLength"] = max(1, int(chars * scale))
    depends_on = step["properties"]["depends_on"]["anyOf"][0]
    depends_on["maxItems"] = steps - 1  # only the other steps, by their indexes
    depends_on["items"].update(minimum=0, maximum=steps - 1)
    schema["properties"]["steps"].update(minItems=1, maxItems=steps)
    schema["required"] = ["locale", "has_enough_context", "thought", "title", "steps"]
    return schema


def _fit(max_chars: int, max_steps: int) -> tuple[int, float]:
    """The most steps (up to ``max_steps``) whose plan fits ``max_chars`` with usable step titles, and
    the factor (at most 1) that shrinks every string's bound so that plan fits."""
    for steps in range(max_steps, 0, -1):
        scale = _scale(max_chars, steps)
        if scale * STEP_STRING_CHARS["title"] >= MIN_STEP_TITLE_CHARS:
            return steps, scale
    return 1, max(_scale(max_chars, 1), 0.0)


def _scale(max_chars: int, steps: int) -> float:
    """The factor for the strings of a plan of ``steps`` steps: what ``max_chars`` leaves them after
    the plan's JSON around them, over what they would take at their full bounds."""
    strings = sum(PLAN_STRING_CHARS.values()) + steps * sum(STEP_STRING_CHARS.values())
    return min(1.0, (max_chars - skeleton_chars(steps)) / strings)


def skeleton_chars(steps: int) -> int:
    """The characters of a plan of ``steps`` steps with every bounded string empty, its locale at its
    bound and every other value at its longest."""
    longest_type = max(StepType, key=len)
    step = Step(need_search=False, title="", step_type=longest_type, depends_on=[steps - 1] * (steps - 1))
    plan = Plan(locale="x" * LOCALE_CHARS, has_enough_context=False, thought="", title="",
                steps=[step] * steps)
    return len(json.dumps(plan.model_dump(mode="json", exclude={"steps": {"__all__": {"execution_res"}}}),
                          ensure_ascii=False))


def mended_plan(reply: str) -> str:
    """The planner's reply as the JSON it meant (fences off, trailing commas, quotes and a cut end
    mended: activities/model/lenient_json.py), or the reply as it was when it holds no JSON object or
    array even so: the workflow reads the plan strictly, so json-repair never runs in workflow code,
    where its time on a hostile reply ("{" × 100,000: 13 s) would fail workflow tasks."""
    try:
        value = lenient_json(without_fences(reply))
    except Unrepairable:
        return reply
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else reply
