"""Per-provider concurrency limits: a burst waits its turn instead of exceeding the limit."""

from __future__ import annotations

import asyncio

import pytest

from activities.limits import provider_slot
from config.settings import get_settings


async def test_no_more_than_the_configured_calls_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_MAX_CONCURRENCY", "3")
    get_settings.cache_clear()
    running, peak = 0, 0

    async def call() -> None:
        nonlocal running, peak
        async with provider_slot("search"):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1

    try:
        await asyncio.gather(*(call() for _ in range(12)))
    finally:
        monkeypatch.delenv("SEARCH_MAX_CONCURRENCY")
        get_settings.cache_clear()
    assert peak == 3
