"""The operator's bound on retrying a call whose attempts keep being lost with their workers.

Why: an attempt lost with its worker (a heartbeat timeout on a starved or killed worker, a
reclaimed ``WorkerLost``, a shutdown) is retried without an attempt limit (issue #19): a count
small enough to stop a poison call (one that kills its worker every time) turned a few minutes of
starvation into failed runs. Time bounds them instead: ``DEERFLOW_WORKER_RETRY_WINDOW``, hours by
default. The provider's own errors keep their count (activities/support/retry_pacing.py).

Enforced here, by the worker that receives an attempt, rather than as the activity's
schedule-to-close: the workflow schedules a run's first model call before it has read the
worker's settings (``load_run_config`` runs beside it), and a timeout set by the workflow would
also fail a call that waits for a worker at all. So a call only ends when a worker takes an
attempt after the window: until then a run waits. Both times compared are the server's (when the
call was first scheduled, when this attempt was), so the clocks of workers do not matter.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

RETRY_WINDOW_EXCEEDED = "RetryWindowExceeded"


class RetryWindowInterceptor(Interceptor):
    """Fails, for good, an attempt that starts later than ``window`` after its call was scheduled."""

    def __init__(self, window: timedelta) -> None:
        self.window = window

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RetryWindowInbound(next, self.window)


class _RetryWindowInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, window: timedelta) -> None:
        super().__init__(next)
        self.window = window

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        retried_for = info.current_attempt_scheduled_time - info.scheduled_time
        if retried_for > self.window:
            raise ApplicationError(
                f"{info.activity_type} was given up after {info.attempt - 1} attempts in {_rounded(retried_for)}, "
                f"longer than DEERFLOW_WORKER_RETRY_WINDOW ({_rounded(self.window)}): its attempts kept being "
                "lost (heartbeat timeouts: workers starved, killed or stopped)",
                type=RETRY_WINDOW_EXCEEDED, non_retryable=True)
        return await super().execute_activity(input)


def _rounded(duration: timedelta) -> timedelta:
    return timedelta(seconds=round(duration.total_seconds()))
