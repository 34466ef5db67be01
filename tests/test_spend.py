"""What runs spent (issue #26 item 4): usage kept per model with its cost, summed by model and by who
started the runs, one line per run in ``list``.

Why: a team lead reads ``starter.py costs`` beside the metrics, so the run's usage must carry each
call's cost as the metric counted it (priced once, by the chat activity), and summing must lose
nothing: not a model, not an unpriced call, not a run recorded before usage was kept per model.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from cli.costs import since_duration
from cli.spend import NOT_RECORDED, cost_cell, summarise, summary_tables, total_line, usd
from config.model_prices import ModelPrice
from offline.model_server import FakeModelServer
from tests.support.chat_requests import COORDINATOR
from tests.support.settings import settings_with
from workflows.decisions import Actor, Via
from workflows.usage import ModelUsage, Usage

ALICE = Actor(name="alice", via=Via.CLI)
BOB = Actor(name="bob", via=Via.API)


def usage(**models: tuple[int, int, int | None]) -> Usage:
    """A run's usage from (input, output, cost) per model, one call each, summed as the workflow sums it."""
    total = Usage()
    for model, (tokens_in, tokens_out, cost) in models.items():
        part = ModelUsage(llm_calls=1, input_tokens=tokens_in, output_tokens=tokens_out, cost_microusd=cost)
        total.add(Usage(llm_calls=1, input_tokens=tokens_in, output_tokens=tokens_out,
                        total_tokens=tokens_in + tokens_out, by_model={model: part}))
    return total


def test_usage_adds_up_per_model_and_keeps_unpriced_apart() -> None:
    run = usage(**{"gpt-4o": (1000, 200, 4500)})
    run.add(usage(**{"gpt-4o": (500, 100, 2250), "local-llama": (300, 30, None)}))
    assert run.llm_calls == 3 and run.total_tokens == 2130
    assert run.by_model["gpt-4o"] == ModelUsage(llm_calls=2, input_tokens=1500, output_tokens=300, cost_microusd=6750)
    assert run.by_model["local-llama"].cost_microusd is None
    assert run.cost_microusd == 6750
    assert usage(**{"local-llama": (10, 1, None)}).cost_microusd is None


def test_a_usage_survives_the_round_trip_through_json() -> None:
    run = usage(**{"gpt-4o": (1000, 200, 4500), "local-llama": (300, 30, None)})
    assert Usage.model_validate_json(run.model_dump_json()) == run
    assert Usage.model_validate({"llm_calls": 2, "total_tokens": 10}).by_model == {}, "usage recorded before"


def test_the_cost_cell_says_what_is_known() -> None:
    assert cost_cell(usage(**{"gpt-4o": (1000, 200, 4500)})) == "1,200 tokens · $0.0045"
    assert cost_cell(usage(**{"gpt-4o": (1000, 200, 4500), "x": (10, 0, None)})) == "1,210 tokens · $0.0045 + unpriced"
    assert cost_cell(usage(**{"x": (10, 0, None)})) == "10 tokens · unpriced"
    assert cost_cell(Usage(llm_calls=1, total_tokens=42)) == "42 tokens · no cost recorded"
    assert cost_cell(None) == "-"
    assert usd(12_345_678_900) == "$12,345.6789"


def test_the_summary_counts_spend_by_model_and_by_starter() -> None:
    summary = summarise([
        (ALICE, usage(**{"gpt-4o": (1000, 200, 4500), "gpt-4o-mini": (2000, 100, 360)})),
        (ALICE, usage(**{"gpt-4o-mini": (1000, 50, 180)})),
        (BOB, usage(**{"local-llama": (700, 70, None)})),
        (None, Usage(llm_calls=1, input_tokens=9, output_tokens=1, total_tokens=10)),
        (BOB, None),
    ])
    by_model, by_starter = summary_tables(summary)
    assert by_model == [
        ("MODEL", "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST"),
        ("gpt-4o", "1", "1", "1,000", "200", "$0.0045"),
        ("gpt-4o-mini", "2", "2", "3,000", "150", "$0.0005"),
        ("local-llama", "1", "1", "700", "70", "unpriced"),
    ]
    assert by_starter == [
        ("STARTED BY", "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST"),
        ("alice (cli)", "2", "3", "4,000", "350", "$0.0050"),
        ("bob (api)", "1", "1", "700", "70", "unpriced"),
        (NOT_RECORDED, "1", "1", "9", "1", "unpriced"),
    ]
    line = total_line(summary)
    assert line.startswith("5 runs · 5,130 tokens · $0.0050 estimated (priced models only)")
    assert "1 without a readable usage" in line and "10 tokens of runs recorded before" in line


@pytest.mark.parametrize(("text", "expected"), [("30m", timedelta(minutes=30)), ("12h", timedelta(hours=12)),
                                                 ("7d", timedelta(days=7)), (" 2w", timedelta(weeks=2))])
def test_since_reads_a_number_and_a_unit(text: str, expected: timedelta) -> None:
    assert since_duration(text) == expected


@pytest.mark.parametrize("text", ["7", "0d", "d", "1y", "-1d", "1.5h"])
def test_since_refuses_anything_else(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="30m, 12h, 7d or 2w"):
        since_duration(text)


async def test_the_chat_activity_prices_its_call_at_the_operators_price(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    prices = '{"deerflow-offline-demo": {"input": 2.5, "output": 10}}'
    response = await ActivityEnvironment().run(
        ModelActivities(settings_with(provider_env, DEERFLOW_MODEL_PRICES=prices)).chat, COORDINATOR)
    tokens_in, tokens_out = response.usage.input_tokens, response.usage.output_tokens
    assert tokens_in > 0 and tokens_out > 0
    assert response.usage.by_model == {"deerflow-offline-demo": ModelUsage(
        llm_calls=1, input_tokens=tokens_in, output_tokens=tokens_out,
        cost_microusd=ModelPrice(input=2.5, output=10).cost_microusd(tokens_in, tokens_out))}
    unpriced = await ActivityEnvironment().run(ModelActivities(settings_with(provider_env)).chat, COORDINATOR)
    assert unpriced.usage.by_model["deerflow-offline-demo"].cost_microusd is None
