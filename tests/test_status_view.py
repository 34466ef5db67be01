"""The status's words, shared by the Web UI details, ``starter.py status`` and ``starter.py watch``."""

from __future__ import annotations

import io
import json

from rich.console import Console

from cli.render import status_text
from cli.watch import render_status
from tests.support.status_samples import T0, at, sample_status
from workflows.models import Awaiting, Phase, ProgressEvent, RunStatus
from workflows.progress import current_details

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
