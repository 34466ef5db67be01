"""Default model prices, for each call's estimated cost (a run's usage, ``starter.py costs`` and the
metric, runtime/metrics.py).

Why a table in code: an operator on a known model gets a sane estimate with no setting, and one on
another model or with a negotiated rate overrides it (``DEERFLOW_MODEL_PRICES``). The figures are
list prices in USD per million tokens; the cost is an estimate, not a bill. A model that is in
neither table still has its tokens counted, and its cost series says ``priced="false"``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ModelPrice(BaseModel):
    """USD per million prompt (input) and completion (output) tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000

    def cost_microusd(self, input_tokens: int, output_tokens: int) -> int:
        """The cost in millionths of a USD: one call's figure in the run's usage and in the
        ``deerflow_llm_cost_microusd`` metric alike (activities/model/telemetry.py reads it there)."""
        return round(self.cost_usd(input_tokens, output_tokens) * 1_000_000)


DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": ModelPrice(input=2.50, output=10.00),
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60),
    "gpt-4.1": ModelPrice(input=2.00, output=8.00),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40),
    "o3": ModelPrice(input=2.00, output=8.00),
    "o4-mini": ModelPrice(input=1.10, output=4.40),
    "deepseek-chat": ModelPrice(input=0.27, output=1.10),
    "deepseek-reasoner": ModelPrice(input=0.55, output=2.19),
    "qwen-max": ModelPrice(input=1.60, output=6.40),
    "qwen-plus": ModelPrice(input=0.40, output=1.20),
}


def default_price(model: str) -> ModelPrice | None:
    """The list price of ``model``, also under a provider prefix (``openai/gpt-4o``)."""
    return DEFAULT_PRICES.get(model) or DEFAULT_PRICES.get(model.rsplit("/", 1)[-1])
