"""Turns the planner's text into a validated ``Plan``.

Models wrap JSON in fences, leave trailing commas or cut it short; json-repair mends what can be
mended (it is pure and deterministic, so it is safe in workflow code), and pydantic decides
whether the result is a plan at all. Errors are one line a person (and the re-asked model) can
read: pydantic's own text carries a documentation URL and spans many lines.
"""

from __future__ import annotations

import re

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import json_repair
    from pydantic import ValidationError

    from workflows.models import Plan

_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*|\s*```\s*$")


class PlanParseError(ValueError):
    """The planner's reply could not be turned into a plan."""


def parse_plan(text: str, max_steps: int, default_locale: str) -> Plan:
    cleaned = _FENCE.sub("", text.strip())
    try:
        data = json_repair.loads(cleaned)
    except Exception as error:  # json_repair raises various types on hopeless input
        raise PlanParseError(f"the planner's reply is not JSON ({error})") from error
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict) or not data:
        raise PlanParseError(f"the planner's reply is not a JSON plan object: {text[:200]!r}")
    data.setdefault("locale", default_locale)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as error:
        raise PlanParseError(f"the planner's plan does not match the schema: {_one_line(error)}") from error
    plan.steps = plan.steps[:max_steps]
    return plan


def require_steps(plan: Plan) -> None:
    """A plan that needs research but lists no step would produce a report from nothing."""
    if not plan.steps and not plan.has_enough_context:
        raise PlanParseError("the plan has no steps (give 1 or more steps, or set has_enough_context to true)")


def _one_line(error: ValidationError) -> str:
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(str(part) for part in item["loc"]) or "plan"
        problems.append(f"{where}: {'missing' if item['type'] == 'missing' else item['msg']}")
    return "; ".join(problems)

