"""Turns Temporal failure chains into the one sentence a person (or a model) needs to read."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutError


def failure_message(error: BaseException) -> str:
    """The root cause's message: ``ActivityError`` itself only says "Activity task failed"."""
    cause: BaseException | None = error
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, ApplicationError):
        return cause.message
    if isinstance(cause, TimeoutError):
        return f"timed out ({cause.type.name.lower().replace('_', '-') if cause.type else 'timeout'})"
    if isinstance(cause, FailureError):
        return cause.message
    return str(cause)
