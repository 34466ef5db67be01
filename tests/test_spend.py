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
from cli.arguments import since_duration
from cli.spend import NOT_RECORDED, RESEARCH, cost_cell, summarise, summary_tables, total_line, usd
from offline.model_server import FakeModelServer
from tests.support.chat_requests import COORDINATOR
from tests.support.settings import settings_with
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.usage import PriceQuote, Usage, call_usage

ALICE = Actor(name="alice", via=Via.CLI)
BOB = Actor(name="bob", via=Via.API)


QUOTE = PriceQuote(input=1.0, cached_input=0.5, output=4.0, source="test")


def usage(**models: tuple[int, int, float | None]) -> Usage:
    """A run's usage from (input, output, cost; None: unpriced) per model, one call each, summed as the
    workflow sums the chat activity's."""
    total = Usage()
    for model, (tokens_in, tokens_out, cost) in models.items():
        call = call_usage(model, QUOTE if cost is not None else None, tokens_in, 0, tokens_out, tokens_in + tokens_out)
        if cost is not None:  # the cost the test states, whatever QUOTE would say
            call.cost_usd = call.by_model[model].cost_usd = cost
        total.add(call)
    return total


def test_the_cost_cell_says_what_is_known() -> None:
    assert cost_cell(usage(**{"gpt-4o": (1000, 200, 0.0045)})) == "1,200 tokens · $0.0045"
    assert cost_cell(usage(**{"gpt-4o": (1000, 200, 0.0045), "x": (10, 0, None)})) == \
        "1,210 tokens · $0.0045 + unpriced"
    assert cost_cell(usage(**{"x": (10, 0, None)})) == "10 tokens · unpriced"
    assert cost_cell(Usage(llm_calls=1, total_tokens=42)) == "42 tokens · no cost recorded"
    assert cost_cell(None) == "-"
    assert usd(12_345.6789) == "$12,345.6789"


def test_the_summary_counts_spend_by_model_by_kind_and_by_starter() -> None:
    summary = summarise([
        (ALICE, RESEARCH, usage(**{"gpt-4o": (1000, 200, 0.0045), "gpt-4o-mini": (2000, 100, 0.00036)})),
        (ALICE, "prose writer", usage(**{"gpt-4o-mini": (1000, 50, 0.00018)})),
        (BOB, RESEARCH, usage(**{"local-llama": (700, 70, None)})),
        (None, RESEARCH, Usage(llm_calls=1, input_tokens=9, output_tokens=1, total_tokens=10)),
        (BOB, "slide composer", None),
    ])
    by_model, by_kind, by_starter, by_ending = summary_tables(summary)
    assert by_ending == [by_ending[0]]  # no ending given: no row
    assert by_kind == [
        ("RUN OR FLOW", "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST"),
        ("research", "3", "4", "3,709", "371", "$0.0049"),
        ("prose writer", "1", "1", "1,000", "50", "$0.0002"),
    ]
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


def test_the_summary_says_what_runs_cost_by_how_they_ended() -> None:
    """``costs`` says how each run ended, as the server says (issue #48 item 5, #49): what cancelled runs cost."""
    summary = summarise([
        (ALICE, RESEARCH, usage(**{"gpt-4o": (1000, 200, 0.0045)}), "completed"),
        (ALICE, RESEARCH, usage(**{"gpt-4o": (300, 0, 0.0009)}), "cancelled"),
        (BOB, RESEARCH, usage(**{"gpt-4o": (100, 10, 0.0002)}), "cancelled"),
        (BOB, RESEARCH, None, "terminated"),  # no readable usage: counted, with no spend
    ])
    assert summary_tables(summary)[-1] == [
        ("ENDED", "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST"),
        ("completed", "1", "1", "1,000", "200", "$0.0045"),
        ("cancelled", "2", "2", "400", "10", "$0.0011"),
        ("terminated", "1", "0", "0", "0", "-"),
    ]


@pytest.mark.parametrize(("text", "expected"), [("30m", timedelta(minutes=30)), ("12h", timedelta(hours=12)),
                                                 ("7d", timedelta(days=7)), (" 2w", timedelta(weeks=2))])
def test_since_reads_a_number_and_a_unit(text: str, expected: timedelta) -> None:
    assert since_duration(text) == expected


@pytest.mark.parametrize("text", ["7", "0d", "d", "1y", "-1d", "1.5h"])
def test_since_refuses_anything_else(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="30m, 12h, 7d or 2w"):
        since_duration(text)


async def test_the_summary_reads_the_cost_the_chat_activity_recorded(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    prices = '{"deerflow-offline-demo": {"input": 2.5, "output": 10}}'
    response = await ActivityEnvironment().run(
        ModelActivities(settings_with(provider_env, DEERFLOW_MODEL_PRICES=prices)).chat, COORDINATOR)
    assert response.usage.cost_usd > 0
    summary = summarise([(ALICE, RESEARCH, response.usage)])
    assert summary_tables(summary)[0][1][-1] == usd(response.usage.cost_usd)
    unpriced = await ActivityEnvironment().run(ModelActivities(settings_with(provider_env)).chat, COORDINATOR)
    assert summary_tables(summarise([(ALICE, RESEARCH, unpriced.usage)]))[0][1][-1] == "unpriced"
