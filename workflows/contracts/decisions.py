"""Who decided: the person behind each plan review, clarification answer and cancel, and the door
they came through.

Why the sender names the actor: the SDK shows a workflow neither the identity of a signal's or an
update's sender nor that of a cancel request, so our front doors send it along: the CLI (the OS user
or ``--as NAME``) and the API server (the name of the token used) add an ``Actor`` as a second
argument of each message, and as the reason of a cancel. A message without one came from outside
our doors (the ``temporal`` CLI or the Web UI) and is recorded as such. The name is what the door
vouches for: the API server's is its token's owner; anyone who may talk to Temporal directly can
claim any name, as Temporal's own ``identity`` in the history can be set to anything.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError

from workflows.contracts.base import Contract


class Via(StrEnum):
    """The door a decision came through."""

    CLI = "cli"  # starter.py: the OS user, or --as NAME
    API = "api"  # the API server (our page, DeerFlow's UI, scripts): the token's owner
    TEMPORAL = "temporal"  # no actor sent: the temporal CLI or the Web UI


class Actor(Contract):
    """Who sent a message, and through which door."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")
    via: Via

    def __str__(self) -> str:
        return f"{self.name} ({self.via.value})"


# Messages that carry no actor: the SDK does not tell the workflow who sent them.
OUTSIDE = Actor(name="temporal CLI or Web UI", via=Via.TEMPORAL)


class Decision(Contract):
    """One decision a person made about a run; ``at`` is workflow time (ISO 8601)."""

    at: str
    kind: Literal["plan_review", "clarification", "cancel", "budget"]
    decision: str  # "[ACCEPTED]", "[EDIT_PLAN] …", the answer, "cancel", "raise to 200,000 tokens"
    by: Actor


class InvalidActor(ValueError):
    """An actor argument that is not an ``Actor``."""


def actor_of(value: object) -> Actor:
    """The actor a message names: a second argument (an ``Actor`` or its JSON object), or none."""
    if value is None:
        return OUTSIDE
    if isinstance(value, Actor):
        return value
    try:
        return Actor.model_validate(value)
    except ValidationError as error:
        raise InvalidActor(f"the sender must be an object with name and via ({error.errors()[0]['msg']})") from None


CANCEL_PREFIX = "deerflow-actor:"


def cancel_reason(actor: Actor) -> str:
    """The reason a front door gives a cancel request, from which the run reads who cancelled it."""
    return CANCEL_PREFIX + actor.model_dump_json()


# The reason a run gives the cancel it asks for itself (activities/run_control.py): its own words follow.
OWN_CANCEL_PREFIX = "deerflow-run: "


def cancelled_by(actor: Actor) -> str:
    return f"Cancelled by {actor}."


def cancel_words(reason: str | None) -> str:
    """What a cancel request's reason tells a reader (the feed's last words): the run's own, when it
    cancelled itself, else who cancelled it, as the run's status says it (status_view.why_cancelled)."""
    if reason is not None and reason.startswith(OWN_CANCEL_PREFIX):
        return reason[len(OWN_CANCEL_PREFIX):][:500]
    return cancelled_by(actor_of_cancel(reason))


def actor_of_cancel(reason: str | None) -> Actor:
    """Who cancelled, from the cancel request's reason; anything else: from outside our doors."""
    if reason is None or not reason.startswith(CANCEL_PREFIX):
        return OUTSIDE
    try:
        return actor_of(json.loads(reason[len(CANCEL_PREFIX):]))
    except (ValueError, InvalidActor):
        return OUTSIDE
