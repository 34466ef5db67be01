"""A run's model usage: calls and tokens, and per model the estimated cost (``starter.py costs``)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ModelUsage(BaseModel):
    """One model's share of a run's usage, with its estimated cost in millionths of a USD at the
    worker's prices when each call was made (``config/model_prices.py``); None: no price known."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_microusd: int | None = None

    def add(self, other: ModelUsage) -> None:
        self.llm_calls += other.llm_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.cost_microusd is not None:
            self.cost_microusd = (self.cost_microusd or 0) + other.cost_microusd


class Usage(BaseModel):
    """LLM usage, summed over a run."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    # Per model, by the operator's name for it: what ``starter.py list`` and ``costs`` report. Empty in
    # usage recorded before it was kept (those runs count tokens, with no model or cost).
    by_model: dict[str, ModelUsage] = Field(default_factory=dict)

    def add(self, other: Usage) -> None:
        self.llm_calls += other.llm_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.total_tokens += other.total_tokens
        for model, part in other.by_model.items():
            self.by_model.setdefault(model, ModelUsage()).add(part)

    @property
    def cost_microusd(self) -> int | None:
        """The priced models' estimated cost; None when no model of the run has a price."""
        costs = [part.cost_microusd for part in self.by_model.values() if part.cost_microusd is not None]
        return sum(costs) if costs else None
