"""A trivial workflow whose history grows by a chosen payload per activity (``bench/dispatch_jump.py``).

Its own module because the workflow sandbox re-imports the module a
workflow is defined in, and the bench scripts' harness does I/O at import.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow

GROW_TASK_QUEUE = "bench-dispatch"


@activity.defn
async def blob(size: int, seconds: float) -> str:
    """Waits ``seconds`` (a provider call), then returns ``size`` bytes of hex, which JSON does not shrink."""
    await asyncio.sleep(seconds)
    return (uuid.uuid4().hex * (size // 32 + 1))[:size]


@workflow.defn
class GrowWorkflow:
    """Sequential activities, one workflow task between each: the shape of a research run's step loop."""

    @workflow.run
    async def run(self, sizes: list[int], seconds: float) -> None:
        for size in sizes:
            await workflow.execute_activity(blob, args=[size, seconds], start_to_close_timeout=timedelta(seconds=30))
