"""DeerFlow's review protocol: only [ACCEPTED] and [EDIT_PLAN] <text> are feedback."""

from __future__ import annotations

import pytest

from workflows.research.review import InvalidFeedback, parse_feedback


@pytest.mark.parametrize("raw", ["[ACCEPTED]", "  [accepted] looks good", "[ACCEPTED]\n"])
def test_accepted(raw: str) -> None:
    assert parse_feedback(raw).accepted


def test_edit_keeps_the_requested_change() -> None:
    feedback = parse_feedback("[EDIT_PLAN]  add a step on costs ")
    assert not feedback.accepted
    assert feedback.edit == "add a step on costs"
    assert feedback.as_message == "[EDIT_PLAN] add a step on costs"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [("yes please", "must start with"), ("[EDIT_PLAN]", "needs a description"), (42, "must be a string"),
     ("", "must start with")],
)
def test_anything_else_is_rejected_with_a_reason(raw: object, reason: str) -> None:
    with pytest.raises(InvalidFeedback, match=reason):
        parse_feedback(raw)
