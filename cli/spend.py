"""What runs spent, summed by model and by who started them: the figures of ``starter.py costs`` and
the cost cell of ``starter.py list``.

Pure: it reads ``Usage`` as the runs recorded it (each call priced once by the chat activity at the
worker's prices, the same figure the ``deerflow_llm_cost_microusd`` metric counts), so a summary
never prices anything again and cannot disagree with the metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from workflows.contracts.decisions import Actor
from workflows.contracts.usage import COST_DIGITS, Usage

NOT_RECORDED = "(not recorded)"  # a run started before the memo named its starter, or from outside our doors
RESEARCH = "research"  # the kind of a research run; a content flow's is its name (workflows/content/flow_usage.py)


def usd(amount: float) -> str:
    """USD to the hundredth of a cent: an offline run costs fractions of one."""
    return f"${amount:,.4f}"


def cost_cell(usage: Usage | None) -> str:
    """One run's spend on one line: ``41,320 tokens · $0.0125`` (``+ unpriced`` when a model of the run
    has no price), ``… · unpriced``, ``… · no cost recorded`` (a run from before), or ``-`` (unknown)."""
    if usage is None:
        return "-"
    if not usage.by_model:
        return f"{usage.total_tokens:,} tokens · no cost recorded"
    if len(usage.unpriced_models) == len(usage.by_model):
        return f"{usage.total_tokens:,} tokens · unpriced"
    return f"{usage.total_tokens:,} tokens · {usd(usage.cost_usd)}{' + unpriced' if usage.unpriced_models else ''}"


@dataclass
class Spend:
    """Runs, calls, tokens and cost under one heading (a model, or who started the runs)."""

    runs: int = 0
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    priced: bool = False  # some of it had a price: else the cost says "unpriced"

    def add(self, llm_calls: int, input_tokens: int, output_tokens: int, cost_usd: float, priced: bool) -> None:
        self.runs += 1
        self.llm_calls += llm_calls
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost_usd = round(self.cost_usd + cost_usd, COST_DIGITS)
        self.priced = self.priced or priced


@dataclass
class SpendSummary:
    """Runs counted, runs whose usage could not be read, and spend by model, by kind of run (research,
    or a content flow) and by starter."""

    runs: int = 0
    unknown: int = 0  # closed without a result and no worker could replay their status
    by_model: dict[str, Spend] = field(default_factory=dict)
    by_kind: dict[str, Spend] = field(default_factory=dict)
    by_starter: dict[str, Spend] = field(default_factory=dict)
    # Tokens of runs recorded before usage was kept per model: counted by starter, under no model.
    untracked_tokens: int = 0
    # By how each run stands or ended, as the server says (running, completed, cancelled, failed, …):
    # what cancelled and failed runs cost. A run whose usage is unreadable counts here, with no spend.
    by_ending: dict[str, Spend] = field(default_factory=dict)

    def add(self, started_by: Actor | None, kind: str, usage: Usage | None, ending: str | None = None) -> None:
        self.runs += 1
        ended = self.by_ending.setdefault(ending, Spend()) if ending is not None else Spend()
        if usage is None:
            self.unknown += 1
            ended.runs += 1
            return
        priced = len(usage.unpriced_models) < len(usage.by_model)
        for heading in (self.by_kind.setdefault(kind, Spend()), ended,
                        self.by_starter.setdefault(str(started_by) if started_by else NOT_RECORDED, Spend())):
            heading.add(usage.llm_calls, usage.input_tokens, usage.output_tokens, usage.cost_usd, priced)
        for model, part in usage.by_model.items():
            self.by_model.setdefault(model, Spend()).add(part.llm_calls, part.input_tokens, part.output_tokens,
                                                         part.cost_usd, part.price is not None)
        if not usage.by_model:
            self.untracked_tokens += usage.total_tokens


def summarise(runs: Iterable[tuple[Actor | None, str, Usage | None] | tuple[Actor | None, str, Usage | None, str]],
              ) -> SpendSummary:
    """Each run's (who started it, its kind, its usage and, where given, how it stands or ended) summed."""
    summary = SpendSummary()
    for started_by, kind, usage, *ending in runs:
        summary.add(started_by, kind, usage, *ending)
    return summary


def _rows(title: str, spends: dict[str, Spend]) -> list[tuple[str, ...]]:
    ordered = sorted(spends.items(), key=lambda item: (-item[1].cost_usd,
                                                       -(item[1].input_tokens + item[1].output_tokens), item[0]))
    return [(title, "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST"), *[
        (name, str(spend.runs), f"{spend.llm_calls:,}", f"{spend.input_tokens:,}", f"{spend.output_tokens:,}",
         _cost(spend)) for name, spend in ordered]]


def _cost(spend: Spend) -> str:
    """Its cost; ``unpriced`` where no call had a price; ``-`` where no call was read."""
    return usd(spend.cost_usd) if spend.priced else "unpriced" if spend.llm_calls else "-"


def summary_tables(summary: SpendSummary) -> list[list[tuple[str, ...]]]:
    """The by-model, by-kind, by-starter and by-ending tables (header first), most expensive first."""
    return [_rows("MODEL", summary.by_model), _rows("RUN OR FLOW", summary.by_kind),
            _rows("STARTED BY", summary.by_starter), _rows("ENDED", summary.by_ending)]


def total_line(summary: SpendSummary) -> str:
    cost = round(sum(spend.cost_usd for spend in summary.by_starter.values()), COST_DIGITS)
    tokens = sum(spend.input_tokens + spend.output_tokens for spend in summary.by_starter.values())
    line = f"{summary.runs} runs · {tokens:,} tokens · {usd(cost)} estimated (priced models only)"
    if summary.unknown:
        line += f" · {summary.unknown} without a readable usage (closed without a result, no worker to replay)"
    if summary.untracked_tokens:
        line += f" · {summary.untracked_tokens:,} tokens of runs recorded before usage was kept per model"
    return line
