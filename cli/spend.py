"""What runs spent, summed by model and by who started them: the figures of ``starter.py costs`` and
the cost cell of ``starter.py list``.

Pure: it reads ``Usage`` as the runs recorded it (each call priced once by the chat activity at the
worker's prices, the same figure the ``deerflow_llm_cost_microusd`` metric counts), so a summary
never prices anything again and cannot disagree with the metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from workflows.decisions import Actor
from workflows.usage import ModelUsage, Usage

NOT_RECORDED = "(not recorded)"  # a run started before the memo named its starter, or from outside our doors


def usd(microusd: int) -> str:
    """Millionths of a USD as dollars, to the hundredth of a cent: an offline run costs fractions of one."""
    return f"${microusd / 1_000_000:,.4f}"


def cost_cell(usage: Usage | None) -> str:
    """One run's spend on one line: ``41,320 tokens · $0.0125`` (``+ unpriced`` when a model of the run
    has no price), ``… · unpriced``, ``… · no cost recorded`` (a run from before), or ``-`` (unknown)."""
    if usage is None:
        return "-"
    cost = usage.cost_microusd
    if not usage.by_model:
        return f"{usage.total_tokens:,} tokens · no cost recorded"
    unpriced = any(part.cost_microusd is None for part in usage.by_model.values())
    if cost is None:
        return f"{usage.total_tokens:,} tokens · unpriced"
    return f"{usage.total_tokens:,} tokens · {usd(cost)}{' + unpriced' if unpriced else ''}"


@dataclass
class Spend:
    """Runs, calls, tokens and cost under one heading (a model, or who started the runs)."""

    runs: int = 0
    usage: ModelUsage = field(default_factory=ModelUsage)

    def add(self, usage: ModelUsage) -> None:
        self.usage.add(usage)


@dataclass
class SpendSummary:
    """Runs counted, runs whose usage could not be read, and spend by model and by starter."""

    runs: int = 0
    unknown: int = 0  # closed without a result and no worker could replay their status
    by_model: dict[str, Spend] = field(default_factory=dict)
    by_starter: dict[str, Spend] = field(default_factory=dict)
    # Tokens of runs recorded before usage was kept per model: counted by starter, under no model.
    untracked_tokens: int = 0

    def add(self, started_by: Actor | None, usage: Usage | None) -> None:
        self.runs += 1
        if usage is None:
            self.unknown += 1
            return
        starter = self.by_starter.setdefault(str(started_by) if started_by else NOT_RECORDED, Spend())
        starter.runs += 1
        starter.add(whole_run(usage))
        for model, part in usage.by_model.items():
            spend = self.by_model.setdefault(model, Spend())
            spend.runs += 1
            spend.add(part)
        if not usage.by_model:
            self.untracked_tokens += usage.total_tokens


def whole_run(usage: Usage) -> ModelUsage:
    """A run's usage as one entry: its tokens, and the cost of its priced models."""
    return ModelUsage(llm_calls=usage.llm_calls, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                      cost_microusd=usage.cost_microusd)


def summarise(runs: Iterable[tuple[Actor | None, Usage | None]]) -> SpendSummary:
    summary = SpendSummary()
    for started_by, usage in runs:
        summary.add(started_by, usage)
    return summary


def _rows(title: str, spends: dict[str, Spend]) -> list[tuple[str, ...]]:
    ordered = sorted(spends.items(), key=lambda item: (-(item[1].usage.cost_microusd or 0),
                                                       -(item[1].usage.input_tokens + item[1].usage.output_tokens),
                                                       item[0]))
    return [(title, "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST"), *[
        (name, str(spend.runs), f"{spend.usage.llm_calls:,}", f"{spend.usage.input_tokens:,}",
         f"{spend.usage.output_tokens:,}", usd(spend.usage.cost_microusd) if spend.usage.cost_microusd is not None
         else "unpriced") for name, spend in ordered]]


def summary_tables(summary: SpendSummary) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """The by-model and by-starter tables (header first), most expensive first."""
    return _rows("MODEL", summary.by_model), _rows("STARTED BY", summary.by_starter)


def total_line(summary: SpendSummary) -> str:
    cost = sum(spend.usage.cost_microusd or 0 for spend in summary.by_starter.values())
    tokens = sum(spend.usage.input_tokens + spend.usage.output_tokens for spend in summary.by_starter.values())
    line = f"{summary.runs} runs · {tokens:,} tokens · {usd(cost)} estimated (priced models only)"
    if summary.unknown:
        line += f" · {summary.unknown} without a readable usage (closed without a result, no worker to replay)"
    if summary.untracked_tokens:
        line += f" · {summary.untracked_tokens:,} tokens of runs recorded before usage was kept per model"
    return line
