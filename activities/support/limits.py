"""Per-provider concurrency limits inside one worker process.

Parallel steps can fire many model calls, searches and crawls at once. A burst past a provider's
rate limit only buys 429s and back-off, so each provider gets a semaphore sized from settings
(``LLM_MAX_CONCURRENCY``, ``SEARCH_MAX_CONCURRENCY``, ``CRAWL_MAX_CONCURRENCY``); calls beyond it
wait their turn, heartbeating, instead of failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

Provider = Literal["llm", "search", "crawl"]
# Process-wide, not per activity object: the provider's rate limit is the worker's, whoever calls.
_semaphores: dict[tuple[Provider, int], asyncio.Semaphore] = {}


@asynccontextmanager
async def provider_slot(provider: Provider, limit: int) -> AsyncIterator[None]:
    """Hold one of ``limit`` slots for ``provider`` (the caller's setting) while the block runs."""
    semaphore = _semaphores.setdefault((provider, limit), asyncio.Semaphore(limit))
    async with semaphore:
        yield
