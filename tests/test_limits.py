"""Per-provider concurrency limits: a burst waits its turn instead of exceeding the limit."""

from __future__ import annotations

import asyncio

from activities.support.limits import provider_slot
from config.settings import Settings


async def test_no_more_than_the_configured_calls_run_at_once() -> None:
    limit = Settings(SEARCH_MAX_CONCURRENCY=3).search_max_concurrency
    running, peak = 0, 0

    async def call() -> None:
        nonlocal running, peak
        async with provider_slot("search", limit):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1

    await asyncio.gather(*(call() for _ in range(12)))
    assert peak == 3
