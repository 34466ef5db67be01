"""A run-wide cap on activities in flight at once, as workflow-side bookkeeping.

Temporal refuses a workflow task that would leave more than 2,000 activities pending, and replay
then repeats the same commands for ever. Every activity a run starts concurrently (tool calls,
model turns of parallel steps, MCP listings) holds a slot while it runs, so the operator's
``DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT`` bounds the whole run. The semaphore is deterministic:
the workflow's event loop wakes waiters in the order they queued, and an uncontended slot is
taken without yielding, so a run under the cap issues exactly the commands it did before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ActivitySlots:
    """At most ``limit`` holders at once; ``None`` (runs recorded before the cap) means no cap."""

    def __init__(self, limit: int | None) -> None:
        self._semaphore = asyncio.Semaphore(limit) if limit else None

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        if self._semaphore is None:
            yield
            return
        async with self._semaphore:
            yield
