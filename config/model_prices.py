"""Default model prices, for each call's cost (workflows/contracts/usage.py): the run's budget, its result and
the estimated-cost metric (runtime/metrics.py) all count the same figure.

Why a table in code: an operator on a known model gets a sane estimate with no setting, and one on
another model or with a negotiated rate overrides it (``DEERFLOW_MODEL_PRICES``). The figures are
list prices in USD per million tokens; the cost is an estimate, not a bill. A model that is in
neither table still has its tokens counted, and its cost series says ``priced="false"``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from workflows.contracts.usage import PriceQuote

OPERATOR_SOURCE = "DEERFLOW_MODEL_PRICES"
LIST_SOURCE = "list price (config/model_prices.py)"


class ModelPrice(BaseModel):
    """USD per million prompt (input), cached prompt and completion (output) tokens. Without
    ``cached_input`` the provider's prompt-cache hits cost as much as other input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)

    def quote(self, source: str) -> PriceQuote:
        """The price as a call's usage records it, with where it came from."""
        cached = self.input if self.cached_input is None else self.cached_input
        return PriceQuote(input=self.input, cached_input=cached, output=self.output, source=source)


DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": ModelPrice(input=2.50, output=10.00, cached_input=1.25),
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60, cached_input=0.075),
    "gpt-4.1": ModelPrice(input=2.00, output=8.00, cached_input=0.50),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60, cached_input=0.10),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40, cached_input=0.025),
    "o3": ModelPrice(input=2.00, output=8.00, cached_input=0.50),
    "o4-mini": ModelPrice(input=1.10, output=4.40, cached_input=0.275),
    "deepseek-chat": ModelPrice(input=0.27, output=1.10, cached_input=0.07),
    "deepseek-reasoner": ModelPrice(input=0.55, output=2.19, cached_input=0.14),
    "qwen-max": ModelPrice(input=1.60, output=6.40),
    "qwen-plus": ModelPrice(input=0.40, output=1.20),
}


def default_price(model: str) -> ModelPrice | None:
    """The list price of ``model``, also under a provider prefix (``openai/gpt-4o``)."""
    return DEFAULT_PRICES.get(model) or DEFAULT_PRICES.get(model.rsplit("/", 1)[-1])
