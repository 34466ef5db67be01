r"""Turns the planner's text into a validated ``Plan``.

Models wrap JSON in fences, leave trailing commas or cut it short; json-repair mends what can be
mended (it is pure and deterministic, so it is safe in workflow code), and pydantic decides
whether the result is a plan at all. Errors are one line a person (and the re-asked model) can
read: pydantic's own text carries a documentation URL and spans many lines.

The reply is model output and this runs in workflow code, so the work is bounded first: a reply
over ``MAX_PLAN_REPLY_CHARS`` is refused unread, the fences are found by scanning (the pattern
``^\s*```[a-zA-Z]*\s*|\s*```\s*$`` it replaces retried at every blank: 60,000 spaces took a minute),
a value nested deeper than ``MAX_PLAN_DEPTH`` is refused, and "\ud800" escapes are read as U+FFFD
(workflows/text/untrusted_text.py), since no payload could carry them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import json_repair
    from pydantic import ValidationError

    from workflows.contracts.plan import Plan
    from workflows.text.untrusted_text import nested_deeper, scrubbed

_LEADING_FENCE = re.compile(r"```[a-zA-Z]*\s*")  # matched at the start only: one linear run
FENCE = "```"
# Many times what the planner's output cap lets through (a plan of 30 steps is some 20,000).
MAX_PLAN_REPLY_CHARS = 200_000
MAX_PLAN_DEPTH = 32  # a plan is 4 levels deep
_TOO_DEEP = object()  # json.loads gave up: deeper than its recursion limit


class PlanParseError(ValueError):
    """The planner's reply could not be turned into a plan."""


def without_fences(text: str) -> str:
    r"""``text`` stripped, without a leading fence (and its language tag) and a closing fence: what
    ``re.sub(r"^\s*```[a-zA-Z]*\s*|\s*```\s*$", "", text.strip())`` gives, in one pass."""
    text = text.strip()
    leading = _LEADING_FENCE.match(text)
    start, end = (leading.end() if leading else 0), len(text)
    if text.endswith(FENCE) and end - len(FENCE) >= start:
        end = max(start, len(text[:end - len(FENCE)].rstrip()))
    return text[start:end]


def parse_plan(text: str, max_steps: int, default_locale: str, *, repair: bool = False) -> Plan:
    """The plan in the planner's reply, read strictly: the ``chat`` activity has mended a reply that
    was not quite JSON already (activities/model/plan_schema.py: ``mended_plan``). ``repair``: mend
    it here with json-repair instead, as runs recorded before that did (their replay)."""
    data = _plan_data(text, repair)
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


def _plan_data(text: str, repair: bool) -> Any:
    """The reply's JSON value, bounded; None: the reply holds none (read strictly)."""
    if len(text) > MAX_PLAN_REPLY_CHARS:
        raise PlanParseError(f"the planner's reply is {len(text):,} characters long, over the "
                             f"{MAX_PLAN_REPLY_CHARS:,} a plan may take")
    if repair:
        try:
            data = json_repair.loads(without_fences(text))
        except Exception as error:  # json_repair raises various types on hopeless input (RecursionError too)
            raise PlanParseError(f"the planner's reply is not JSON ({error})") from error
    else:
        try:
            data = json.loads(without_fences(text))
        except RecursionError:
            data = _TOO_DEEP
        except ValueError:
            return None  # refused by the caller as no plan object, quoting the reply
    if data is _TOO_DEEP or nested_deeper(data, MAX_PLAN_DEPTH):
        raise PlanParseError(f"the planner's reply is nested deeper than {MAX_PLAN_DEPTH} levels")
    return scrubbed(data)


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

