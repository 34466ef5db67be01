"""Many runs against a fleet capped at R model requests per second: what the quota test and bench share.

Why: the cap is the task queue's (``LLM_REQUESTS_PER_SECOND``, hosting/registry.py), so only real
worker processes on a real server show whether the fleet as a whole keeps to it. The fake model
runs in the caller's process and stamps each request's arrival, so the rate is measured where the
provider would see it, not where the workers think they sent it.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from runtime import research_client
from tests.support.history_checks import process_of
from tests.support.runs import QUESTION, run_id
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import ResearchRequest, ResearchResult


@dataclass(frozen=True)
class Rate:
    """Requests per second over the saturated middle of a drill, and the most requests in any window
    of ``span`` seconds anywhere in it (what a provider counting fixed windows could see at worst)."""

    requests: int  # every request the drill sent
    window_requests: int
    window_seconds: float
    busiest_second: int
    span: float
    busiest_span: int

    @property
    def per_second(self) -> float:
        return self.window_requests / self.window_seconds if self.window_seconds else 0.0

    @property
    def busiest_per_second(self) -> float:
        return self.busiest_span / self.span


def busiest(times: list[float], seconds: float) -> int:
    """The most of the sorted ``times`` in any window ``[t, t + seconds)``."""
    return max((sum(1 for other in times[index:] if other < start + seconds) for index, start in enumerate(times)),
               default=0)


def measured_rate(arrivals: list[float], skip: float = 0.1, span: float = 10.0) -> Rate:
    """The rate between the arrivals at the ``skip`` and ``1 - skip`` quantiles, and the busiest
    ``span`` seconds.

    The mean leaves out the runs' first calls (all at once, before the server's limiter has a
    backlog) and their last ones (fewer runs left than the cap can serve): it is the rate where
    demand exceeds the cap. The busiest window counts everything, the first calls' burst included:
    the server's limiter lets a second's worth of calls through at once after its queue was empty
    (a GCRA with a 1 s burst in matching), so any ``span`` holds at most R x (span + 1) + 1 calls.
    """
    times = sorted(arrivals)
    if len(times) < 3:
        return Rate(len(times), 0, 0.0, len(times), span, len(times))
    first, last = int(len(times) * skip), int(len(times) * (1 - skip)) - 1
    return Rate(len(times), last - first, times[last] - times[first], busiest(times, 1.0), span, busiest(times, span))


def rate_while_waiting(starts: list[float], waits: list[tuple[float, float]]) -> tuple[int, float]:
    """The gaps between the server's ``starts`` of calls while another call waited: their number and seconds.

    ``waits``: (scheduled, started) of calls started at their first attempt (a retried call's wait
    includes its lost attempts' run). A gap counts only when a call was already waiting as it began,
    so the rate is the cap's and not the demand's: runs on a loaded machine that ask for less than
    R are no miss of the cap.
    """
    gaps = [later - earlier for earlier, later in itertools.pairwise(sorted(starts))
            if any(scheduled <= earlier < started for scheduled, started in waits)]
    return len(gaps), sum(gaps)


@dataclass(frozen=True)
class ChatStart:
    """One model call as the server started it (its last attempt: history keeps no other)."""

    scheduled: float
    started: float
    attempt: int
    process: str


def chat_starts(events: list[HistoryEvent]) -> list[ChatStart]:
    """The run's model calls, with when each was scheduled and started and by which worker process."""
    scheduled = {event.event_id: event for event in events
                 if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and event.activity_task_scheduled_event_attributes.activity_type.name == "chat"}
    return [ChatStart(scheduled[started.scheduled_event_id].event_time.ToDatetime().timestamp(),
                      event.event_time.ToDatetime().timestamp(), started.attempt, process_of(started.identity))
            for event in events if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and (started := event.activity_task_started_event_attributes).scheduled_event_id in scheduled]


async def chat_starts_of(client: Client, prefix: str) -> list[ChatStart]:
    """The model calls of every run whose id starts with ``prefix``."""
    starts = []
    async for execution in client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'"):
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        starts += chat_starts(list(history.events))
    return starts


DRILL = Actor(name="quota-drill", via=Via.CLI)  # who started the drill's runs, as ``starter.py costs`` shows


async def run_many(client: Client, runs: int, prefix: str, max_steps: int = 1) -> list[ResearchResult]:
    """Start ``runs`` research runs at once (plans accepted), as the front doors start them, and wait
    for every result."""
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=max_steps)
    handles = await asyncio.gather(*(
        research_client.start(client, request, run_id=run_id(f"{prefix}-{index}"), summary=prefix, started_by=DRILL)
        for index in range(runs)))
    return list(await asyncio.gather(*(handle.result() for handle in handles)))
