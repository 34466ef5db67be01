"""What people send a paused run: DeerFlow's plan-review protocol (``[ACCEPTED]`` or
``[EDIT_PLAN] <what to change>``) and clarification answers, checked before the run acts on them,
each with who sent it (workflows/contracts/decisions.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workflows.contracts.budget import BudgetDecision
from workflows.contracts.decisions import OUTSIDE, Actor, InvalidActor, actor_of
from workflows.contracts.undecodable import Undecodable

ACCEPTED = "[ACCEPTED]"
EDIT_PLAN = "[EDIT_PLAN]"


class InvalidFeedback(ValueError):
    """Feedback that follows neither form of the protocol."""


@dataclass(frozen=True)
class Feedback:
    accepted: bool
    edit: str = ""  # what to change, when not accepted
    by: Actor = OUTSIDE

    @property
    def as_message(self) -> str:
        return ACCEPTED if self.accepted else f"{EDIT_PLAN} {self.edit}"


@dataclass(frozen=True)
class Answer:
    """A clarification answer and who gave it."""

    text: str
    by: Actor = OUTSIDE


@dataclass
class Inbox:
    """Accepted messages from people, waiting for the run's main method to take them. Filled only
    while the run awaits a person, so it is always empty at a continue-as-new: it is not state."""

    feedback: list[Feedback] = field(default_factory=list)
    clarifications: list[Answer] = field(default_factory=list)
    budget: list[tuple[BudgetDecision, Actor]] = field(default_factory=list)


def parse_feedback(raw: object, by: object = None) -> Feedback:
    """Parse one feedback value and its sender; raises ``InvalidFeedback`` with a reason a person
    can act on."""
    refuse_undecodable(raw)
    sender = sender_of(by)
    if not isinstance(raw, str):
        raise InvalidFeedback(f"feedback must be a string, got {type(raw).__name__}")
    text = raw.strip()
    upper = text.upper()
    if upper.startswith(ACCEPTED):
        return Feedback(accepted=True, by=sender)
    if upper.startswith(EDIT_PLAN):
        edit = text[len(EDIT_PLAN):].strip()
        if not edit:
            raise InvalidFeedback("[EDIT_PLAN] needs a description of what to change")
        return Feedback(accepted=False, edit=edit, by=sender)
    raise InvalidFeedback(
        f"feedback must start with {ACCEPTED} or {EDIT_PLAN} <what to change>; got {text[:80]!r}"
    )


def refuse_undecodable(value: object) -> None:
    """A message the worker could not decode (workflows/contracts/undecodable.py) is refused with its reason."""
    if isinstance(value, Undecodable):
        raise InvalidFeedback(value.reason)


def sender_of(by: object) -> Actor:
    """Who sent a message: the actor our front doors add, or from outside them when there is none."""
    refuse_undecodable(by)
    try:
        return actor_of(by)
    except InvalidActor as error:
        raise InvalidFeedback(str(error)) from None


def message_inputs(inputs: Sequence[object], shape: str = "one JSON string") -> tuple[object, object]:
    """The value a signal or update carries and its optional sender; the ``temporal`` CLI can send
    none or several values. ``shape`` is what the value should be, for the refusal."""
    if not 1 <= len(inputs) <= 2:
        raise InvalidFeedback(f"expected {shape} (and optionally its sender), got {len(inputs)} inputs")
    return inputs[0], inputs[1] if len(inputs) == 2 else None


def nonempty_answer(answer: object, by: object = None) -> Answer:
    """A clarification answer: a string with some text in it, and who gave it."""
    refuse_undecodable(answer)
    if not isinstance(answer, str) or not answer.strip():
        raise InvalidFeedback("a clarification answer must be a non-empty string")
    return Answer(answer.strip(), sender_of(by))
