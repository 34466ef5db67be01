"""Retries of the failures an activity raises, kept apart from the retry of a lost attempt.

Why: a retry policy has one initial interval and one attempt count for every failure. The attempt
lost with a dead or starved worker (a heartbeat timeout) should be retried at once, and for as long
as the operator's retry window allows (hosting/retry_window.py), since the work was never done
and nothing is wrong with the provider; a provider that answered with an error should be given
time, and given up after a few tries. So those kinds schedule with a short initial interval
(``LOST_ATTEMPT_RETRY``) and no attempt limit, and this decorator, for each retryable failure the
activity raises:

- gives it the delay its kind's ``failure_backoff`` computes for the attempt, through
  ``next_retry_delay`` (a delay the activity chose itself, a provider's Retry-After, is kept);
- counts it, and makes the kind's ``provider_attempts``-th one final (non-retryable, its message
  and type kept), so a provider that stays down still ends the call with its own error.

The count is carried from attempt to attempt in the heartbeat details: each beat repeats the
details the attempt started with (runtime/heartbeat.py), so an attempt lost on the way keeps
it, and the count is beaten once more just before the failure is raised. The SDK reports the
newest details with the failure, and the server hands them to the next attempt. The failure's own
first detail rides along after the count (:func:`carried_detail`): the chat activity's failure says
there what its calls spent, and the next attempt adds that to its own usage (activities/model/chat.py),
so a call whose attempt failed and was retried still counts in the run's usage.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, FailureError

from workflows.calls.activity_options import ACTIVITY_OPTIONS

P = ParamSpec("P")
R = TypeVar("R")


def provider_failures(info: activity.Info) -> int:
    """The failures earlier attempts of this call raised, as carried in its heartbeat details."""
    details = info.heartbeat_details
    return details[0] if details and isinstance(details[0], int) and details[0] >= 0 else 0


def carried_detail(info: activity.Info) -> object | None:
    """The first detail of the failure the previous attempt raised (beaten after the count), or None."""
    details = info.heartbeat_details
    return details[1] if len(details) > 1 else None


def paced(error: Exception) -> Exception:
    """``error`` as the attempt should report it: final if it is the kind's last provider attempt,
    else paced with the kind's back-off, or as it is if neither applies (the count is beaten here)."""
    if isinstance(error, FailureError) and not isinstance(error, ApplicationError):
        return error  # the SDK's own (cancellation and the like): not the provider's failure
    if isinstance(error, ApplicationError) and error.non_retryable:
        return error
    info = activity.info()
    options = ACTIVITY_OPTIONS.get(info.activity_type)
    if options is None:
        return error
    if options.provider_attempts is not None:
        failures = provider_failures(info) + 1
        if failures >= options.provider_attempts:
            return _replaced(error, non_retryable=True)
        carried = error.details[:1] if isinstance(error, ApplicationError) else ()
        activity.heartbeat(failures, *carried)
    if options.failure_backoff is None or (isinstance(error, ApplicationError) and error.next_retry_delay):
        return error
    return _replaced(error, next_retry_delay=options.failure_backoff.delay(info.attempt))


def _replaced(error: Exception, *, non_retryable: bool = False,
              next_retry_delay: timedelta | None = None) -> ApplicationError:
    """What the SDK would report for ``error`` (an unexpected exception: its class name as the
    type), final or with a delay."""
    if isinstance(error, ApplicationError):
        return ApplicationError(error.message, *error.details, type=error.type, category=error.category,
                                non_retryable=non_retryable, next_retry_delay=next_retry_delay)
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=non_retryable,
                            next_retry_delay=next_retry_delay)


def paced_retries(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Pace and count ``fn``'s retryable failures (place it under ``@heartbeating``, so the count
    is beaten before the beats stop)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except Exception as error:
            replacement = paced(error)
            if replacement is error:
                raise
            raise replacement from error.__cause__ if isinstance(error, ApplicationError) else error

    return wrapper
