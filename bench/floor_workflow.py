"""The platform floor: a trivial workflow of sequential sleeping activities, for contrast with a real run.

Why: on a shared 2-core machine part of every scheduling gap is the Temporal server and SDK, not
this product's workflow code. ``bench/overhead.py`` runs this after each research run, on the same
dev server, with one activity per step of the research run's critical path sleeping as long as
that step took, so its wall / critical-path ratio is what any workflow would get here.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

FLOOR_TASK_QUEUE = "bench-floor"


@activity.defn
async def nap(seconds: float) -> None:
    """Stands in for a provider call: waits, does nothing."""
    await asyncio.sleep(seconds)


@workflow.defn
class FloorWorkflow:
    @workflow.run
    async def run(self, durations: list[float]) -> None:
        for seconds in durations:
            await workflow.execute_activity(nap, seconds, start_to_close_timeout=timedelta(seconds=60))
