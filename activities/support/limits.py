"""Per-provider concurrency limits inside one worker process.

Parallel steps can fire many model calls, searches and crawls at once. A burst past a provider's
rate limit only buys 429s and back-off, so each provider gets a semaphore sized from settings
(``LLM_MAX_CONCURRENCY``, ``SEARCH_MAX_CONCURRENCY``, ``CRAWL_MAX_CONCURRENCY``); calls beyond it
wait their turn, heartbeating, instead of failing.

A provider's tokens-per-minute quota (``LLM_TPM``) is a rate, not a count in flight:
aiolimiter's leaky bucket (a maintained library; a bucket of our own would be the same dozen lines
with fewer users) lets a minute's tokens through in a burst and then as they drip out. Each
worker process holds its own bucket; requests per second across the fleet are the task queue's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from aiolimiter import AsyncLimiter

Provider = Literal["llm", "search", "crawl"]
# Process-wide, not per activity object: the provider's rate limit is the worker's, whoever calls.
_semaphores: dict[tuple[Provider, int], asyncio.Semaphore] = {}


@asynccontextmanager
async def provider_slot(provider: Provider, limit: int) -> AsyncIterator[None]:
    """Hold one of ``limit`` slots for ``provider`` (the caller's setting) while the block runs."""
    semaphore = _semaphores.setdefault((provider, limit), asyncio.Semaphore(limit))
    async with semaphore:
        yield


# Process-wide like the semaphores: one bucket per per-minute quota.
_token_buckets: dict[int, AsyncLimiter] = {}


async def spend_tokens(per_minute: int | None, tokens: int) -> None:
    """Wait until the process's bucket of ``per_minute`` tokens has room for ``tokens`` (None: no quota).

    A request larger than a whole minute's quota waits for an empty bucket and takes all of it:
    refusing it would fail a call the provider may well accept.
    """
    if per_minute is None:
        return
    bucket = _token_buckets.setdefault(per_minute, AsyncLimiter(per_minute, 60))
    await bucket.acquire(min(max(tokens, 0), per_minute))
