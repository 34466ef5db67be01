"""The status's words, shared by the Web UI details, ``starter.py status`` and ``starter.py watch``."""

from __future__ import annotations

import io
import json

from rich.console import Console

from cli.render import status_text
from cli.watch import render_status
from tests.support.status_samples import T0, at, sample_status
from workflows.contracts.budget import RunBudget
from workflows.contracts.status import Awaiting, Phase, ProgressEvent, RunStatus
from workflows.contracts.usage import PriceQuote, call_usage
from workflows.research.progress import current_details
from workflows.research.status_view import budget_forecast

REVIEW = sample_status(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK, review_deadline=at(86400))
IGNORED = ProgressEvent(at=at(30), kind="ignored", message="plan_feedback: feedback must be a string, got int")


def panel_text(status: RunStatus) -> str:
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(render_status(status, "r1", T0))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_awaiting_keeps_the_wire_values_of_the_old_strings() -> None:
    assert [member.value for member in Awaiting] == ["plan_feedback", "clarification_answer", "budget"]
    assert json.loads(REVIEW.model_dump_json())["awaiting"] == "plan_feedback"
    assert RunStatus.model_validate({"phase": "awaiting_review", "awaiting": "plan_feedback"}).awaiting \
        is Awaiting.PLAN_FEEDBACK


def test_every_view_says_what_the_run_awaits_and_how_to_answer() -> None:
    for text in (current_details(REVIEW), status_text("r1", REVIEW), panel_text(REVIEW)):
        assert "Awaiting plan review" in text and "[ACCEPTED]" in text
        assert "starter.py review" in text and "--accept" in text
    assert "Awaiting: plan_feedback" in status_text("r1", REVIEW)
    assert "(until 2025-03-02 09:00 UTC)" in current_details(REVIEW)


def test_every_view_shows_an_ignored_signal_and_why() -> None:
    status = REVIEW.model_copy(update={"events": [*REVIEW.events, IGNORED]})
    for text in (current_details(status), status_text("r1", status), panel_text(status)):
        assert "ignored signal plan_feedback: feedback must be a string, got int" in text, text


def test_views_without_ignored_signals_do_not_mention_them() -> None:
    for text in (current_details(REVIEW), status_text("r1", REVIEW)):
        assert "gnored" not in text


def test_every_view_shows_spent_and_remaining_of_both_budgets_and_the_price_source() -> None:
    price = PriceQuote(input=2.5, cached_input=1.25, output=10, source="DEERFLOW_MODEL_PRICES")
    usage = call_usage("gpt-4o", price, 1_000, 0, 200, 1_200)
    usage.add(call_usage("local-model", None, 800, 0, 0, 800))
    paused = sample_status(phase=Phase.AWAITING_BUDGET, awaiting=Awaiting.BUDGET, usage=usage,
                           budget=RunBudget(tokens=2_500, cost_usd=0.01, step_tokens=[900], expected_next_step=900,
                                            expected_next_step_usd=0.004, expected_rest=1_800,
                                            expected_rest_usd=0.008))
    line = "2,000 of 2,500 tokens spent, 500 left; $0.0045 of $0.0100 spent, $0.0055 left"
    for text in (current_details(paused), status_text("r1", paused), panel_text(paused)):
        flat = " ".join(text.replace("│", " ").split())  # the panel wraps long lines inside its border
        assert line in flat, flat
        assert "the rest of the plan 1,800 tokens ($0.0080)" in flat
        assert "no price for local-model: its tokens count, its cost does not" in flat
        assert "--raise-usd USD" in flat
    assert "gpt-4o at $2.5 in, $1.25 cached in, $10 out per million tokens (DEERFLOW_MODEL_PRICES)" in \
        status_text("r1", paused)


def test_a_pause_before_any_step_says_no_steps_cost_is_known_and_prices_only_what_has_a_price() -> None:
    """Before a step has finished the run has no mean to go by: it said "the next step is expected to
    cost 0 tokens ($0.0000)". With no priced model, no price is said at all."""
    usage = call_usage("local-model", None, 2_000, 0, 145, 2_145)
    paused = sample_status(phase=Phase.AWAITING_BUDGET, awaiting=Awaiting.BUDGET, usage=usage,
                           budget=RunBudget(tokens=7_000, expected_next_step=0, expected_rest=0,
                                            expected_next_step_usd=0.0, expected_rest_usd=0.0,
                                            expected_report=8_922, expected_report_usd=0.0))
    assert budget_forecast(paused) == [
        "no step has finished yet, so what a step costs is not known",
        "finishing now, the report is expected to cost at most 8,922 tokens, more than the budget has left: "
        "it would go over"]
    for text in (current_details(paused), status_text("r1", paused), panel_text(paused)):
        flat = " ".join(text.replace("│", " ").split())
        assert "no step has finished yet" in flat and "cost 0 tokens" not in flat and "($0.0000)" not in flat, flat
