"""Retry back-off for the failures an activity raises, kept apart from the retry of a lost attempt.

Why: a retry policy has one initial interval for every failure. The attempt lost with a dead
worker (a heartbeat timeout) should be retried at once, since the work was never done; a provider
that answered with an error should be given time. So the kinds that need both schedule with a
short initial interval (``LOST_ATTEMPT_RETRY``), and this decorator gives every retryable failure
the activity raises the delay its kind's ``failure_backoff`` computes for the attempt, through
``next_retry_delay``; a delay the activity chose itself (a provider's Retry-After) is kept. The
server still applies the policy's attempt and time limits.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, FailureError

from workflows.activity_options import ACTIVITY_OPTIONS

P = ParamSpec("P")
R = TypeVar("R")


def paced(error: Exception) -> Exception:
    """``error`` with its kind's failure back-off as ``next_retry_delay``, or as it is if none applies."""
    info = activity.info()
    options = ACTIVITY_OPTIONS.get(info.activity_type)
    backoff = options.failure_backoff if options else None
    if backoff is None:
        return error
    delay = backoff.delay(info.attempt)
    if isinstance(error, ApplicationError):
        if error.non_retryable or error.next_retry_delay is not None:
            return error
        return ApplicationError(error.message, *error.details, type=error.type, next_retry_delay=delay,
                                category=error.category)
    if isinstance(error, FailureError):  # the SDK's own (cancellation and the like): not a failure to pace
        return error
    # What the SDK would report for an unexpected exception (its class name as the type), paced.
    return ApplicationError(str(error), type=type(error).__name__, next_retry_delay=delay)


def paced_retries(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Give ``fn``'s retryable failures their kind's back-off (place it under ``@activity.defn``)."""

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
