"""The budget's contracts (workflows/research/budget.py has the logic): what a person decides about a run paused
at its budget, and the budget as the run's status shows it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field, model_validator

from workflows.contracts.base import Contract
from workflows.contracts.usage import COST_DIGITS, PriceQuote, Usage

# Beyond these, an amount is said in three significant digits: a request may name 1e300, which a
# note must not print as 300 digits (issue #48 item 3).
READABLE_TOKENS = 10**15
READABLE_USD = 1e12


class BudgetTimeoutAction(StrEnum):
    """What happens when nobody decides within ``review_timeout``."""

    FINISH = "finish"
    CANCEL = "cancel"


class BudgetAction(StrEnum):
    RAISE = "raise"  # a new, higher budget (``tokens``, ``cost_usd`` or both), up to the operator's maximum
    FINISH = "finish"  # no more steps: the reporter writes from what was found
    CANCEL = "cancel"  # the run ends without a report


class BudgetDecision(Contract):
    """What a person sends a run paused for its budget (the ``budget`` signal, the ``decide_budget`` update)."""

    model_config = ConfigDict(extra="forbid")

    action: BudgetAction
    tokens: int | None = Field(default=None, ge=1)  # the new token budget, with ``raise``
    cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # the new cost budget, with ``raise``

    @model_validator(mode="after")
    def _amount_with_raise(self) -> BudgetDecision:
        if (self.action is BudgetAction.RAISE) != (self.tokens is not None or self.cost_usd is not None):
            raise ValueError("'tokens' or 'cost_usd' (the new budget) goes with 'raise', and only with it")
        return self

    def as_text(self) -> str:
        if self.action is not BudgetAction.RAISE:
            return self.action.value
        amounts = [f"{tokens_text(self.tokens)} tokens" if self.tokens is not None else "",
                   usd(self.cost_usd) if self.cost_usd is not None else ""]
        return "raise to " + " and ".join(amount for amount in amounts if amount)


def usd(amount: float) -> str:
    """A cost as people read it: ``$0.0123``, ``$12.50``, ``$1e+300``."""
    if amount >= READABLE_USD:
        return f"${amount:.3g}"
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def tokens_text(count: int) -> str:
    """A number of tokens as people read it: ``7,000``, ``1e+300``."""
    return f"{count:,}" if count < READABLE_TOKENS else f"{float(count):.3g}"


class ReportReserve(Contract):
    """What the reporter's turn needs beyond the findings it reads, from the worker's settings (the
    ``load_run_config`` activity): its prompt and fixed messages (estimated), its output cap, and the
    price of its model. The budget keeps that much free before every step, so that "finish now" (or
    the report after the last step) stays within it (workflows/research/report_reserve.py)."""

    prompt_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    price: PriceQuote | None = None  # None: the reporter's model has no price; its cost is not counted


class RunBudget(Contract):
    """The run's token and cost budgets as they stand (in the status); spent is the run's usage."""

    tokens: int | None = None  # None: no token budget
    maximum: int | None = None  # the operator's: no raise goes beyond it
    step_tokens: list[int] = Field(default_factory=list)  # what each finished step cost
    step_output_tokens: list[int] = Field(default_factory=list)  # of which its replies (its finding among them)
    expected_next_step: int | None = None  # while paused: what the next step is expected to cost
    expected_rest: int | None = None  # while paused: what the rest of the plan is expected to cost
    cut_short: bool = False  # a person (or the timeout) chose to finish now
    # The cost budget in USD, beside the tokens (runs from before it: none), and the same figures.
    cost_usd: float | None = None
    cost_maximum_usd: float | None = None
    step_costs_usd: list[float] = Field(default_factory=list)
    expected_next_step_usd: float | None = None
    expected_rest_usd: float | None = None
    # While paused: what the report is expected to cost at most if the research finishes now (its
    # reserve: workflows/research/report_reserve.py). None: runs from before the reserve, or no pause.
    expected_report: int | None = None
    expected_report_usd: float | None = None


class BudgetStanding(Contract):
    """Spent and remaining of a run's budgets, as the status and the result show them: computed from
    the budget and the usage whenever it is read, so it is never out of step with either."""

    spent_tokens: int
    remaining_tokens: int | None  # None: no token budget
    spent_usd: float  # the priced calls' cost
    remaining_usd: float | None  # None: no cost budget
    unpriced_models: list[str]  # models whose calls count against the tokens only


def standing(budget: RunBudget | None, usage: Usage) -> BudgetStanding | None:
    """The standing of ``budget`` after ``usage``; None for a run without a budget."""
    if budget is None:
        return None
    tokens, cost = budget.tokens, budget.cost_usd
    return BudgetStanding(
        spent_tokens=usage.total_tokens, spent_usd=usage.cost_usd,
        remaining_tokens=max(tokens - usage.total_tokens, 0) if tokens is not None else None,
        remaining_usd=max(round(cost - usage.cost_usd, COST_DIGITS), 0.0) if cost is not None else None,
        unpriced_models=usage.unpriced_models)
