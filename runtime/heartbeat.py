"""Heartbeats for activities that wait on the outside world.

In runtime/, not activities/: the sandbox's activity (sandbox/activity.py) heartbeats too, and the
sandbox's worker imports nothing of activities/ (tests/test_import_directions.py).

An activity with a heartbeat timeout is declared lost as soon as its worker stops heartbeating,
so a call in flight on a crashed worker is retried within seconds instead of after its whole
start-to-close timeout. The interval is derived from the heartbeat timeout the workflow scheduled
the activity with (``workflows/calls/activity_options.py``), like the SDK's ``contrib/openai_agents``
does, so the two cannot drift apart: several beats fit in one timeout, and the SDK sends at most
one per 80% of it anyway.

Every beat repeats the details the attempt started with: a beat replaces the details the server
keeps for the next attempt, and those carry the count of the provider's failures so far
(activities/support/retry_pacing.py), which a lost attempt must not erase. An attempt may change
what its beats repeat with :func:`carry`: the chat activity says there that a call is in flight, so
an attempt lost with its worker still counts that call in the run's usage (issue #24). A beat may
never reach the server (the SDK sends at most one per throttle interval, and a SIGKILL drops the
one held back), so ``carry`` also hands the details to :data:`carried_details_sink`: the worker's
in-flight journal (hosting/journal_interceptor.py), from which a successor that reclaims the lost
attempt reports them to the server as its last heartbeat (hosting/reclaim.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from datetime import timedelta
from typing import ParamSpec, TypeVar

from temporalio import activity

BEATS_PER_TIMEOUT = 5
MIN_INTERVAL_SECONDS = 0.5
# Without a heartbeat timeout nobody waits for beats, but they still carry cancellation to the activity.
INTERVAL_WITHOUT_TIMEOUT_SECONDS = 2.0

P = ParamSpec("P")
R = TypeVar("R")
_repeated: ContextVar[list[object]] = ContextVar("heartbeat_details_repeated")
# Set per attempt by whoever keeps a durable note of it (the worker's in-flight journal); None in tests
# that run an activity alone.
carried_details_sink: ContextVar[Callable[[Sequence[object]], None] | None] = ContextVar(
    "carried_details_sink", default=None)


def heartbeat_interval(heartbeat_timeout: timedelta | None) -> float:
    """Seconds between beats for an activity scheduled with ``heartbeat_timeout``."""
    if not heartbeat_timeout:
        return INTERVAL_WITHOUT_TIMEOUT_SECONDS
    return max(MIN_INTERVAL_SECONDS, heartbeat_timeout.total_seconds() / BEATS_PER_TIMEOUT)


async def _beat_forever(interval: float, details: list[object]) -> None:
    while True:
        activity.heartbeat(*details)
        await asyncio.sleep(interval)


def carry(*details: object) -> None:
    """From now on, this attempt's beats repeat ``details`` (beaten at once): what the next attempt
    starts with should this one be lost. Only inside a ``@heartbeating`` activity."""
    repeated = _repeated.get()
    repeated[:] = details
    sink = carried_details_sink.get()
    if sink is not None:
        sink(details)
    activity.heartbeat(*details)


def heartbeating(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Heartbeat in the background while ``fn`` runs (place it under ``@activity.defn``)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        details = list(activity.info().heartbeat_details)
        token = _repeated.set(details)
        beater = asyncio.create_task(_beat_forever(heartbeat_interval(activity.info().heartbeat_timeout), details))
        try:
            return await fn(*args, **kwargs)
        finally:
            beater.cancel()
            _repeated.reset(token)

    return wrapper
