"""The kept HTTP clients' bookkeeping (activities/support/pooled_http.py); their reuse of connections
is tested with each provider (test_search_providers.py, test_retrieval.py, test_content_flows.py)."""

from __future__ import annotations

import asyncio

import httpx

from activities.support import pooled_http
from activities.support.pooled_http import MAX_CLIENTS_PER_LOOP, pooled_client


async def test_a_loop_keeps_a_bounded_number_of_clients_and_replaces_a_closed_one() -> None:
    built: list[httpx.AsyncClient] = []

    def build() -> httpx.AsyncClient:
        built.append(httpx.AsyncClient())
        return built[-1]

    first = pooled_client(("bounded", 0), build)
    assert pooled_client(("bounded", 0), build) is first and len(built) == 1
    for n in range(1, MAX_CLIENTS_PER_LOOP + 1):
        pooled_client(("bounded", n), build)
    assert len(pooled_http._clients[asyncio.get_running_loop()]) <= MAX_CLIENTS_PER_LOOP
    assert pooled_client(("bounded", 0), build) is not first  # the oldest was dropped

    latest = pooled_client(("bounded", MAX_CLIENTS_PER_LOOP), build)
    await latest.aclose()
    assert pooled_client(("bounded", MAX_CLIENTS_PER_LOOP), build) is not latest
    for client in built:
        await client.aclose()
