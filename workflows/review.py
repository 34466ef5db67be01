"""What people send a paused run: DeerFlow's plan-review protocol (``[ACCEPTED]`` or
``[EDIT_PLAN] <what to change>``) and clarification answers, checked before the run acts on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workflows.undecodable import Undecodable

ACCEPTED = "[ACCEPTED]"
EDIT_PLAN = "[EDIT_PLAN]"


class InvalidFeedback(ValueError):
    """Feedback that follows neither form of the protocol."""


@dataclass(frozen=True)
class Feedback:
    accepted: bool
    edit: str = ""  # what to change, when not accepted

    @property
    def as_message(self) -> str:
        return ACCEPTED if self.accepted else f"{EDIT_PLAN} {self.edit}"


@dataclass
class Inbox:
    """Accepted messages from people, waiting for the run's main method to take them. Filled only
    while the run awaits a person, so it is always empty at a continue-as-new: it is not state."""

    feedback: list[Feedback] = field(default_factory=list)
    clarifications: list[str] = field(default_factory=list)


def parse_feedback(raw: object) -> Feedback:
    """Parse one feedback value; raises ``InvalidFeedback`` with a reason a person can act on."""
    refuse_undecodable(raw)
    if not isinstance(raw, str):
        raise InvalidFeedback(f"feedback must be a string, got {type(raw).__name__}")
    text = raw.strip()
    upper = text.upper()
    if upper.startswith(ACCEPTED):
        return Feedback(accepted=True)
    if upper.startswith(EDIT_PLAN):
        edit = text[len(EDIT_PLAN):].strip()
        if not edit:
            raise InvalidFeedback("[EDIT_PLAN] needs a description of what to change")
        return Feedback(accepted=False, edit=edit)
    raise InvalidFeedback(
        f"feedback must start with {ACCEPTED} or {EDIT_PLAN} <what to change>; got {text[:80]!r}"
    )


def refuse_undecodable(value: object) -> None:
    """A message the worker could not decode (workflows/undecodable.py) is refused with its reason."""
    if isinstance(value, Undecodable):
        raise InvalidFeedback(value.reason)


def one_input(inputs: Sequence[object]) -> object:
    """The single value a signal must carry; the ``temporal`` CLI can send none or several."""
    if len(inputs) != 1:
        raise InvalidFeedback(f"expected one JSON string, got {len(inputs)} inputs")
    return inputs[0]


def nonempty_answer(answer: object) -> str:
    """A clarification answer: a string with some text in it."""
    refuse_undecodable(answer)
    if not isinstance(answer, str) or not answer.strip():
        raise InvalidFeedback("a clarification answer must be a non-empty string")
    return answer.strip()
