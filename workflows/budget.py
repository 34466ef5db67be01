"""A run's token budget: before each research step, the run checks whether that step is expected to
cross it, and if so pauses (``awaiting: budget``, a durable wait like plan review) until a person
raises the budget (up to the operator's maximum), finishes now (the reporter writes from what was
found, and the result says the research was cut short) or cancels. Past ``review_timeout``,
``budget_timeout_action`` decides.

The operator sets a default and a maximum (RunConfig, from the worker's settings); a request may
ask for less, never more. A run without a budget never checks, so runs recorded before budgets
existed replay as they ran; the pause itself is behind ``BUDGET_PATCH``.

What a step is expected to cost is the mean of the steps this run has finished (none yet: nothing),
so the first pause comes at the latest when the budget is spent.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.budget_models import BudgetAction, BudgetDecision, BudgetTimeoutAction, RunBudget
    from workflows.decisions import Actor
    from workflows.models import Awaiting, Outcome, Phase, ResearchResult
    from workflows.research_run import ResearchRun, ReviewTimedOut, RunEnded
    from workflows.review import InvalidFeedback, refuse_undecodable, sender_of

BUDGET_PATCH = "run-budget"


def parse_budget_decision(raw: object, by: object, budget: RunBudget | None) -> tuple[BudgetDecision, Actor]:
    """A decision and its sender, checked against the run's budget; ``InvalidFeedback`` says why not."""
    refuse_undecodable(raw)
    sender = sender_of(by)
    try:
        decision = BudgetDecision.model_validate(raw)
    except ValueError as error:
        raise InvalidFeedback(f"a budget decision is {{\"action\": \"raise\", \"tokens\": N}}, "
                              f"{{\"action\": \"finish\"}} or {{\"action\": \"cancel\"}} ({error})") from None
    if decision.action is BudgetAction.RAISE and budget is not None:
        assert decision.tokens is not None
        if budget.tokens is not None and decision.tokens <= budget.tokens:
            raise InvalidFeedback(f"a raise must go above the current budget of {budget.tokens:,} tokens")
        if budget.maximum is not None and decision.tokens > budget.maximum:
            raise InvalidFeedback(f"the operator's maximum is {budget.maximum:,} tokens")
    return decision, sender


def start_budget(run: ResearchRun) -> RunBudget | None:
    """The run's budget, from the request and the operator's default and maximum (set once per run);
    None when neither the request nor the operator sets one."""
    status = run.state.status
    config, requested = run.state.config, run.request.token_budget
    if status.budget is None and (requested, config.token_budget_default, config.token_budget_max) != (None,) * 3:
        maximum = config.token_budget_max
        tokens = requested if requested is not None else config.token_budget_default
        if tokens is not None and maximum is not None and tokens > maximum:
            run.state.note(f"The requested token budget ({tokens:,}) is above the operator's maximum; "
                           f"the run has {maximum:,}.")
            tokens = maximum
        status.budget = RunBudget(tokens=tokens, maximum=maximum)
    return status.budget


async def within_budget(run: ResearchRun, steps_left: int) -> bool:
    """Before a step: True to run it, False to finish now. Pauses while the step would cross the budget
    (one pause at a time: parallel steps wait for the decision of the first)."""
    budget = start_budget(run)
    if budget is None:
        return True
    async with run.budget_lock:
        return await _check(run, budget, steps_left)


async def _check(run: ResearchRun, budget: RunBudget, steps_left: int) -> bool:
    while not budget.cut_short and budget.tokens is not None:
        expected = sum(budget.step_tokens) // len(budget.step_tokens) if budget.step_tokens else 0
        if run.state.status.usage.total_tokens + expected <= budget.tokens or not workflow.patched(BUDGET_PATCH):
            return True
        budget.expected_next_step, budget.expected_rest = expected, expected * steps_left
        decision = await _decision(run)
        budget.expected_next_step = budget.expected_rest = None
        if decision.action is BudgetAction.RAISE:
            budget.tokens = decision.tokens
        elif decision.action is BudgetAction.FINISH:
            _cut_short(run, "a person chose to finish now")
        else:
            raise RunEnded(_cancelled(run, "a person cancelled it at its token budget"))
    return not budget.cut_short


async def _decision(run: ResearchRun) -> BudgetDecision:
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
        return BudgetDecision(action=BudgetAction.FINISH)
    decision, by = inbox.pop(0)
    run.state.decide("budget", decision.as_text(), by)
    run.state.enter(Phase.RESEARCHING)
    return decision


def _cut_short(run: ResearchRun, why: str) -> None:
    budget = run.state.status.budget
    assert budget is not None
    budget.cut_short = True
    run.state.note(f"The research was cut short by the token budget ({budget.tokens:,} tokens): {why}. "
                   "The report is written from what was found.")


def _cancelled(run: ResearchRun, why: str) -> ResearchResult:
    return ResearchResult(report=f"The run was cancelled at its token budget: {why}.", plan=run.state.plan,
                          locale=run.state.report_locale, outcome=Outcome.CANCELLED)
