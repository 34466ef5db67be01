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

from config.settings import get_settings

Provider = Literal["llm", "search", "crawl"]
_semaphores: dict[tuple[Provider, int], asyncio.Semaphore] = {}


def _limit(provider: Provider) -> int:
    settings = get_settings()
    return {"llm": settings.llm_max_concurrency, "search": settings.search_max_concurrency,
            "crawl": settings.crawl_max_concurrency}[provider]


@asynccontextmanager
async def provider_slot(provider: Provider) -> AsyncIterator[None]:
    limit = _limit(provider)
    semaphore = _semaphores.setdefault((provider, limit), asyncio.Semaphore(limit))
    async with semaphore:
        yield
