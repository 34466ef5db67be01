"""A worker interceptor that scrubs secrets from everything an activity hands back.

Why an interceptor: results, failure messages, failure details, their causes and heartbeat details
are the text that leaves an activity for history, the blob store and the model. Catching them at
the one door every activity passes through covers the activities written later too, which a
scrub call in each activity would not.

A failure is rebuilt as an ``ApplicationError`` with the same type, retry behaviour and traceback,
a scrubbed message and details, and a scrubbed copy of its cause chain (Temporal serialises
``__cause__`` messages too). Cancellations and Temporal's own errors pass through untouched.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ApplicationError, FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from activities.guards.secret_scrubber import SecretScrubber

MAX_CAUSE_DEPTH = 8


class SecretScrubbingInterceptor(Interceptor):
    """Register on the worker: ``Worker(..., interceptors=[SecretScrubbingInterceptor(scrubber)])``,
    with the scrubber built from the worker's settings (``SecretScrubber.for_settings``)."""

    def __init__(self, scrubber: SecretScrubber) -> None:
        self.scrubber = scrubber

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ScrubbingInbound(next, self.scrubber)


class _ScrubbingInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, scrubber: SecretScrubber) -> None:
        super().__init__(next)
        self.scrubber = scrubber

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_ScrubbingOutbound(outbound, self.scrubber))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            result = await super().execute_activity(input)
        except Exception as exc:
            if isinstance(exc, FailureError) and not isinstance(exc, ApplicationError):
                raise  # cancellation and the like: Temporal's own, carrying no activity text
            error = scrubbed_error(exc, self.scrubber)
            error.__suppress_context__ = True  # not "from None": that would drop the scrubbed causes
            raise error  # noqa: B904
        return self.scrubber.scrub_value(result)


class _ScrubbingOutbound(ActivityOutboundInterceptor):
    def __init__(self, next: ActivityOutboundInterceptor, scrubber: SecretScrubber) -> None:
        super().__init__(next)
        self.scrubber = scrubber

    def heartbeat(self, *details: Any) -> None:
        super().heartbeat(*self.scrubber.scrub_value(details))


def scrubbed_error(exc: BaseException, scrubber: SecretScrubber, depth: int = 0) -> ApplicationError:
    """``exc`` as an ApplicationError with nothing secret in its message, details or causes."""
    if isinstance(exc, ApplicationError):
        error = ApplicationError(
            scrubber.scrub(exc.message),
            *scrubber.scrub_value(tuple(exc.details)),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            category=exc.category,
        )
    else:
        # What Temporal would record for a plain exception: its class name as the type, retryable.
        error = ApplicationError(scrubber.scrub(str(exc)), type=type(exc).__name__)
    cause = exc.__cause__
    if cause is not None and depth < MAX_CAUSE_DEPTH:
        error.__cause__ = scrubbed_error(cause, scrubber, depth + 1)
    return error.with_traceback(exc.__traceback__)
