"""Many runs against a fleet capped at R model requests per second: what the quota test and bench share.

Why: the cap is the task queue's (``LLM_REQUESTS_PER_SECOND``, hosting/registry.py), so only real
worker processes on a real server show whether the fleet as a whole keeps to it. The fake model
runs in the caller's process and stamps each request's arrival, so the rate is measured where the
provider would see it, not where the workers think they sent it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.client import Client

from runtime import research_client
from tests.support.runs import QUESTION, run_id
from workflows.decisions import Actor, Via
from workflows.models import ResearchRequest, ResearchResult


@dataclass(frozen=True)
class Rate:
    """Requests per second over the saturated middle of a drill, and the busiest second anywhere."""

    requests: int  # every request the drill sent
    window_requests: int
    window_seconds: float
    busiest_second: int

    @property
    def per_second(self) -> float:
        return self.window_requests / self.window_seconds if self.window_seconds else 0.0


def measured_rate(arrivals: list[float], skip: float = 0.1) -> Rate:
    """The rate between the arrivals at the ``skip`` and ``1 - skip`` quantiles: the runs' first calls
    (all at once, before the server's limiter has a backlog) and their last ones (fewer runs left
    than the cap can serve) are left out, so the window is the part where demand exceeds the cap."""
    times = sorted(arrivals)
    if len(times) < 3:
        return Rate(len(times), 0, 0.0, len(times))
    first, last = int(len(times) * skip), int(len(times) * (1 - skip)) - 1
    busiest = max(sum(1 for other in times[index:] if other < start + 1.0) for index, start in enumerate(times))
    return Rate(len(times), last - first, times[last] - times[first], busiest)


DRILL = Actor(name="quota-drill", via=Via.CLI)  # who started the drill's runs, as ``starter.py costs`` shows


async def run_many(client: Client, runs: int, prefix: str, max_steps: int = 1) -> list[ResearchResult]:
    """Start ``runs`` research runs at once (plans accepted), as the front doors start them, and wait
    for every result."""
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=max_steps)
    handles = await asyncio.gather(*(
        research_client.start(client, request, run_id=run_id(f"{prefix}-{index}"), summary=prefix, started_by=DRILL)
        for index in range(runs)))
    return list(await asyncio.gather(*(handle.result() for handle in handles)))
