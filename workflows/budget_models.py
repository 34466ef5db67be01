"""The budget's contracts (workflows/budget.py has the logic): what a person decides about a run paused
at its budget, and the budget as the run's status shows it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BudgetTimeoutAction(StrEnum):
    """What happens when nobody decides within ``review_timeout``."""

    FINISH = "finish"
    CANCEL = "cancel"


class BudgetAction(StrEnum):
    RAISE = "raise"  # a new, higher budget (``tokens``), up to the operator's maximum
    FINISH = "finish"  # no more steps: the reporter writes from what was found
    CANCEL = "cancel"  # the run ends without a report


class BudgetDecision(BaseModel):
    """What a person sends a run paused for its budget (the ``budget`` signal, the ``decide_budget`` update)."""

    model_config = ConfigDict(extra="forbid")

    action: BudgetAction
    tokens: int | None = Field(default=None, ge=1)  # the new token budget, with ``raise``

    @model_validator(mode="after")
    def _tokens_with_raise(self) -> BudgetDecision:
        if (self.action is BudgetAction.RAISE) != (self.tokens is not None):
            raise ValueError("'tokens' (the new budget) goes with 'raise', and only with it")
        return self

    def as_text(self) -> str:
        return f"raise to {self.tokens:,} tokens" if self.action is BudgetAction.RAISE else self.action.value


class RunBudget(BaseModel):
    """The run's token budget as it stands (in the status); spent is the run's usage."""

    tokens: int | None = None  # None: no budget
    maximum: int | None = None  # the operator's: no raise goes beyond it
    step_tokens: list[int] = Field(default_factory=list)  # what each finished step cost
    expected_next_step: int | None = None  # while paused: what the next step is expected to cost
    expected_rest: int | None = None  # while paused: what the rest of the plan is expected to cost
    cut_short: bool = False  # a person (or the timeout) chose to finish now
