"""What a run's model calls used and cost: tokens, and USD at the operator's prices, per model.

Why the chat activity prices each call (``activities/model/llm.py``) and the workflow only sums:
the price table is the worker's setting, and a call priced where it ran is recorded in history with
its cost, so a replay sees the figures the run saw, and the cost metric counts the very same figure.
A model without a price still has its tokens counted; its ``price`` is None and its cost is not
counted, which every reader of a cost is told (``unpriced_models``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import ConfigDict, Field

from workflows.contracts.base import Contract

MICRO = 1_000_000
# Costs are kept to the micro-USD (the cost metric's unit), so sums stay exact enough to compare.
COST_DIGITS = 6


class PriceQuote(Contract):
    """The price a model's tokens were charged at (USD per million tokens), and where it came from."""

    model_config = ConfigDict(frozen=True)

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0)  # input tokens the provider served from its prompt cache
    output: float = Field(ge=0)
    source: str  # "DEERFLOW_MODEL_PRICES" (the operator's table) or "list price (config/model_prices.py)"

    def cost_usd(self, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> float:
        """One call's cost; cached input tokens are part of ``input_tokens``, at their own price."""
        fresh = max(input_tokens - cached_input_tokens, 0)
        per_million = fresh * self.input + cached_input_tokens * self.cached_input + output_tokens * self.output
        return round(per_million / MICRO, COST_DIGITS)

    def __str__(self) -> str:
        return (f"${self.input:g} in, ${self.cached_input:g} cached in, ${self.output:g} out per million tokens "
                f"({self.source})")


class ModelUsage(Contract):
    """One model's share of the usage; ``price`` None: the model has no price, its cost is not counted."""

    llm_calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    price: PriceQuote | None = None


class Usage(Contract):
    """LLM usage, summed over a run: tokens of every call, cost of the priced ones, and per model."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0  # of the input tokens
    cost_usd: float = 0.0  # of the calls whose model has a price
    json_tool_calls: int = 0  # of ``llm_calls``, the tool-offering turns made in JSON tool mode (issue #24)
    by_model: dict[str, ModelUsage] = Field(default_factory=dict)

    def add(self, other: Usage) -> None:
        """``other``'s counts and cost added to this one's, overall and per model."""
        _add_counts(self, other)
        for model, theirs in other.by_model.items():
            mine = self.by_model.setdefault(model, ModelUsage(price=theirs.price))
            _add_counts(mine, theirs)
            mine.price = theirs.price or mine.price  # the latest price the model was charged at

    @property
    def unpriced_models(self) -> list[str]:
        """Models whose calls are in the tokens but not in the cost."""
        return sorted(model for model, usage in self.by_model.items() if usage.price is None)


def _add_counts(mine: Usage | ModelUsage, theirs: Usage | ModelUsage) -> None:
    """Every count of ``theirs`` added to ``mine``'s, and the cost kept to the micro-USD: one loop over
    the fields, so a count added to either model cannot be forgotten in the sum."""
    for name in type(mine).model_fields:
        value = getattr(theirs, name)
        if name == "cost_usd":
            mine.cost_usd = round(mine.cost_usd + value, COST_DIGITS)
        elif isinstance(value, int):
            setattr(mine, name, getattr(mine, name) + value)


def call_usage(model: str, price: PriceQuote | None, input_tokens: int, cached_input_tokens: int,
               output_tokens: int, total_tokens: int) -> Usage:
    """One model call's usage, priced at ``price`` (None: unpriced)."""
    cost = price.cost_usd(input_tokens, cached_input_tokens, output_tokens) if price is not None else 0.0
    return Usage(llm_calls=1, input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=total_tokens,
                 cached_input_tokens=cached_input_tokens, cost_usd=cost,
                 by_model={model: ModelUsage(llm_calls=1, input_tokens=input_tokens,
                                             cached_input_tokens=cached_input_tokens, output_tokens=output_tokens,
                                             cost_usd=cost, price=price)})


class UsageSink(Protocol):
    """Where a model call's usage is added: a ``Usage``, or :class:`Counted` to add it to two."""

    def add(self, other: Usage) -> None: ...


@dataclass(frozen=True)
class Counted:
    """Usage added to the run's and to a part's own: a research step's calls, counted apart from its
    siblings' when steps run side by side (issue #48 item 4: each counted the other's as its own)."""

    run: Usage
    part: Usage

    def add(self, other: Usage) -> None:
        self.run.add(other)
        self.part.add(other)
