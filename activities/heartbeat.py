"""Heartbeats for activities that wait on the outside world.

An activity with a heartbeat timeout is declared lost as soon as its worker stops heartbeating,
so a call in flight on a crashed worker is retried within seconds instead of after its whole
start-to-close timeout.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio import activity

HEARTBEAT_INTERVAL_SECONDS = 2.0

P = ParamSpec("P")
R = TypeVar("R")


async def _beat_forever(interval: float) -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(interval)


def heartbeating(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Heartbeat in the background while ``fn`` runs (place it under ``@activity.defn``)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        beater = asyncio.create_task(_beat_forever(HEARTBEAT_INTERVAL_SECONDS))
        try:
            return await fn(*args, **kwargs)
        finally:
            beater.cancel()

    return wrapper
