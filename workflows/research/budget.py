"""A run's token and cost budgets: before each research step, the run checks whether that step is
expected to cross either, and if so pauses (``awaiting: budget``, a durable wait like plan review)
until a person raises a budget (up to the operator's maximum), finishes now (the reporter writes
from what was found, and the result says the research was cut short) or cancels. Past
``review_timeout``, ``budget_timeout_action`` decides.

The operator sets a default and a maximum of each (RunConfig, from the worker's settings); a
request may ask for less, never more, and one that names no budget where the operator sets no
default has the maximum (``MAXIMUM_BOUNDS_PATCH``). The cost is the priced calls' (workflows/contracts/usage.py):
a model without a price counts against the token budget only, which the status says. A run without a
budget never checks, so runs recorded before budgets existed replay as they ran; the pause is behind
``BUDGET_PATCH``, and a pause for cost behind ``COST_BUDGET_PATCH``.

What a step is expected to cost is the mean of the steps this run has finished, each its own calls
(none yet: nothing). Beyond it the budget keeps the report's reserve free (workflows/research/report_reserve.py),
so that the report written when the research ends stays within the budget; a pause says what
finishing now costs, and when the budget no longer has that left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.calls.inputs import validation_summary
    from workflows.contracts.budget import (
        BudgetAction,
        BudgetDecision,
        BudgetTimeoutAction,
        RunBudget,
        tokens_text,
        usd,
    )
    from workflows.contracts.decisions import Actor
    from workflows.contracts.research import Outcome, ResearchResult
    from workflows.contracts.status import Awaiting, Phase
    from workflows.contracts.usage import COST_DIGITS
    from workflows.research.report_reserve import report_cost
    from workflows.research.research_run import ResearchRun, ReviewTimedOut, RunEnded
    from workflows.research.review import InvalidFeedback, refuse_undecodable, sender_of

BUDGET_PATCH = "run-budget"
# The operator's maximum is the budget of a run that names none and has no default (issue #48 item 3:
# such a run had no budget at all).
MAXIMUM_BOUNDS_PATCH = "budget-maximum-bounds"
DECISION_SHAPE = "one JSON object"  # what a budget decision is, for the refusal of a message without one
COST_BUDGET_PATCH = "run-cost-budget"
N = TypeVar("N", int, float)


def parse_budget_decision(raw: object, by: object, budget: RunBudget | None) -> tuple[BudgetDecision, Actor]:
    """A decision and its sender, checked against the run's budget; ``InvalidFeedback`` says why not."""
    refuse_undecodable(raw)
    sender = sender_of(by)
    try:
        decision = BudgetDecision.model_validate(raw)
    except ValidationError as error:
        raise InvalidFeedback(f"a budget decision is {{\"action\": \"raise\", \"tokens\": N, \"cost_usd\": USD}} "
                              f"(either or both), {{\"action\": \"finish\"}} or {{\"action\": \"cancel\"}} "
                              f"({validation_summary(error)})") from None
    if decision.action is BudgetAction.RAISE and budget is not None:
        _check_raise(decision.tokens, budget.tokens, budget.maximum, lambda tokens: f"{tokens_text(tokens)} tokens")
        _check_raise(decision.cost_usd, budget.cost_usd, budget.cost_maximum_usd, usd)
    return decision, sender


def _check_raise(new: N | None, current: N | None, maximum: N | None, said: Callable[[N], str]) -> None:
    if new is None:
        return
    if current is not None and new <= current:
        raise InvalidFeedback(f"a raise must go above the current budget of {said(current)}")
    if maximum is not None and new > maximum:
        raise InvalidFeedback(f"the operator's maximum is {said(maximum)}")


def start_budget(run: ResearchRun) -> RunBudget | None:
    """The run's budget, from the request and the operator's defaults and maximums (set once per run);
    None when neither the request nor the operator sets one."""
    status, config, request = run.state.status, run.state.config, run.request
    token_values = (request.token_budget, config.token_budget_default, config.token_budget_max)
    cost_values = (request.cost_budget_usd, config.cost_budget_usd_default, config.cost_budget_usd_max)
    if status.budget is None and (token_values, cost_values) != ((None,) * 3, (None,) * 3):
        status.budget = RunBudget(tokens=_capped(run, *token_values, "token budget", tokens_text),
                                  maximum=config.token_budget_max,
                                  cost_usd=_capped(run, *cost_values, "cost budget", usd),
                                  cost_maximum_usd=config.cost_budget_usd_max)
    return status.budget


def _capped(run: ResearchRun, requested: N | None, default: N | None, maximum: N | None, what: str,
            said: Callable[[N], str]) -> N | None:
    """The request's amount, else the operator's default, else the maximum; never above the maximum
    (the run says so)."""
    amount = requested if requested is not None else default
    if amount is None and maximum is not None and workflow.patched(MAXIMUM_BOUNDS_PATCH):
        return maximum
    if amount is not None and maximum is not None and amount > maximum:
        run.state.note(f"The requested {what} ({said(amount)}) is above the operator's maximum; "
                       f"the run has {said(maximum)}.")
        return maximum
    return amount


async def within_budget(run: ResearchRun, steps_left: int) -> bool:
    """Before a step: True to run it, False to finish now. Pauses while the step would cross the budget
    (one pause at a time: parallel steps wait for the decision of the first)."""
    budget = start_budget(run)
    if budget is None:
        return True
    async with run.budget_lock:
        return await _check(run, budget, steps_left)


async def _check(run: ResearchRun, budget: RunBudget, steps_left: int) -> bool:
    while not budget.cut_short and _crossing(run, budget):
        budget.expected_rest = (budget.expected_next_step or 0) * steps_left
        budget.expected_rest_usd = round((budget.expected_next_step_usd or 0.0) * steps_left, COST_DIGITS)
        decision = await _decision(run)
        budget.expected_next_step = budget.expected_rest = budget.expected_report = None
        budget.expected_next_step_usd = budget.expected_rest_usd = budget.expected_report_usd = None
        if decision is None:  # nobody decided in time: the timeout's action has cut the research short
            break
        if decision.action is BudgetAction.RAISE:
            budget.tokens = decision.tokens if decision.tokens is not None else budget.tokens
            budget.cost_usd = decision.cost_usd if decision.cost_usd is not None else budget.cost_usd
        elif decision.action is BudgetAction.FINISH:
            _cut_short(run, "a person chose to finish now")
        else:
            raise RunEnded(_cancelled(run, "a person cancelled it"))
    return not budget.cut_short


def _crossing(run: ResearchRun, budget: RunBudget) -> bool:
    """Whether the next step, and then the report, are expected to cross a budget; if so, the budget
    shows what the step is expected to cost, and the report if the research finished now."""
    usage = run.state.status.usage
    tokens = _mean(budget.step_tokens)
    cost = round(sum(budget.step_costs_usd) / len(budget.step_costs_usd), COST_DIGITS) if budget.step_costs_usd else 0.0
    report_tokens, report_usd = report_cost(run, budget, _mean(budget.step_output_tokens))
    over_tokens = budget.tokens is not None and usage.total_tokens + tokens + report_tokens > budget.tokens
    over_cost = budget.cost_usd is not None and usage.cost_usd + cost + report_usd > budget.cost_usd
    # Each pause behind the patch of the code that brought it, so older runs replay as they ran.
    if (over_tokens and workflow.patched(BUDGET_PATCH)) or (over_cost and workflow.patched(COST_BUDGET_PATCH)):
        budget.expected_next_step, budget.expected_next_step_usd = tokens, cost
        if run.state.config.report_reserve is not None:
            budget.expected_report, budget.expected_report_usd = report_cost(run, budget)
        return True
    return False


def _mean(values: list[int]) -> int:
    return sum(values) // len(values) if values else 0


async def _decision(run: ResearchRun) -> BudgetDecision | None:
    """A person's decision; None when nobody decided in time and ``budget_timeout_action`` finished the
    research (said once, as the timeout it was: runs before issue #48 also noted "a person chose to
    finish now"; a note is no command, so they replay alike)."""
    inbox = run.inbox.budget
    run.await_person(Phase.AWAITING_BUDGET, Awaiting.BUDGET)
    try:
        await run.wait_for_person(lambda: bool(inbox), "budget decision deadline")
    except ReviewTimedOut:
        action = run.request.budget_timeout_action
        run.state.record("budget", f"No budget decision within {run.request.review_timeout}: {action.value}")
        if action is BudgetTimeoutAction.CANCEL:
            raise RunEnded(_cancelled(run, f"nobody decided within {run.request.review_timeout}")) from None
        _cut_short(run, f"nobody decided within {run.request.review_timeout}")
        return None
    decision, by = inbox.pop(0)
    run.state.decide("budget", decision.as_text(), by)
    run.state.enter(Phase.RESEARCHING)
    return decision


def _limits(budget: RunBudget) -> str:
    """The budgets in words: ``token budget (7,000 tokens)``, ``budget (7,000 tokens, $0.0100)``."""
    amounts = [f"{tokens_text(budget.tokens)} tokens" if budget.tokens is not None else "",
               usd(budget.cost_usd) if budget.cost_usd is not None else ""]
    kind = "token budget" if budget.cost_usd is None else "cost budget" if budget.tokens is None else "budget"
    return f"{kind} ({', '.join(amount for amount in amounts if amount)})"


def _cut_short(run: ResearchRun, why: str) -> None:
    budget = run.state.status.budget
    assert budget is not None
    budget.cut_short = True
    run.state.note(f"The research was cut short by the {_limits(budget)}: {why}. "
                   "The report is written from what was found.")


def _cancelled(run: ResearchRun, why: str) -> ResearchResult:
    budget = run.state.status.budget
    assert budget is not None
    return ResearchResult(report=f"The run was cancelled at its {_limits(budget)}: {why}.",
                          plan=run.state.plan, locale=run.state.report_locale, outcome=Outcome.CANCELLED)
