"""``hosting.registry.running``: a held queue is polled only once its ``until`` has returned.

Why: under a request quota worker.py holds the model queue's poll until the model libraries are
imported; calls the server started meanwhile would wait in the process and reach the provider in
one clump. The fleet drill (test_fleet_quota) sees that only as a rate, which a starved machine
blurs; here the hold itself is checked, on stand-ins that record when they were started.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from temporalio.worker import Worker

from hosting.registry import running


class StandIn:
    """What ``running`` uses of a Worker: entered to poll, shut down at the end."""

    def __init__(self, task_queue: str, started: list[str]) -> None:
        self.task_queue = task_queue
        self._started = started

    async def __aenter__(self) -> StandIn:
        self._started.append(self.task_queue)
        return self

    async def __aexit__(self, *_: Any) -> None:
        return None

    async def shutdown(self) -> None:
        return None


async def test_the_held_queue_polls_only_after_until_returns() -> None:
    started: list[str] = []
    main, model = StandIn("main", started), StandIn("model", started)
    imported = asyncio.Event()

    async def until() -> None:
        await imported.wait()

    workers = cast(list[Worker], [main, model])
    async with running(workers, held=cast(list[Worker], [model]), until=until):
        for _ in range(20):  # every chance to start early
            await asyncio.sleep(0)
        assert started == ["main"]
        imported.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert started == ["main", "model"]


async def test_a_stop_before_until_returns_never_starts_the_held_queue() -> None:
    started: list[str] = []
    main, model = StandIn("main", started), StandIn("model", started)

    async def never() -> None:
        await asyncio.Event().wait()

    async with running(cast(list[Worker], [main, model]), held=cast(list[Worker], [model]), until=never):
        await asyncio.sleep(0)
    assert started == ["main"]
