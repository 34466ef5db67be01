"""Where the seconds of a crash go: the lost call's timeline, read from the server while it recovers.

Why: resume after a ``kill -9`` is the sum of the heartbeat timeout still to run, the retry
back-off, the wait for a worker to poll, and the retried call itself. Only the last two show in
the history (the retry's Started and Completed events); the first two are in the server's
pending-activity record (last heartbeat, when the attempt was given up, when the retry is due),
which is gone once the retry completes, so it is sampled while the run recovers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import WorkflowHandle, WorkflowHistory

from tests.support.history_checks import COMPLETED, STARTED, activity_events, event_time

SAMPLE_SECONDS = 0.05


def _time(stamp: Timestamp) -> datetime | None:
    return stamp.ToDatetime(tzinfo=UTC) if stamp.seconds or stamp.nanos else None


@dataclass(frozen=True)
class LostAttempt:
    """The call in flight on the dead worker, from its last heartbeat to its retry's completion."""

    activity_id: str
    activity_type: str
    last_heartbeat: datetime | None  # the last beat the server received from the dead worker
    timed_out: datetime | None  # the server gave the attempt up (its heartbeat timeout)
    retry_due: datetime | None  # the retry back-off ended
    retry_started: datetime | None = None  # a worker took the retry
    retry_completed: datetime | None = None

    def with_history(self, history: WorkflowHistory) -> LostAttempt:
        """Add the retry's Started and Completed times (attempt 2 or later) from the finished run."""
        events = activity_events(history).get(self.activity_id, [])
        started = next((event for event in events if event.event_type == STARTED
                        and event.activity_task_started_event_attributes.attempt > 1), None)
        completed = next((event for event in events if event.event_type == COMPLETED), None)
        return replace(self, retry_started=event_time(started) if started else None,
                       retry_completed=event_time(completed) if completed else None)


def _lost(info: PendingActivityInfo) -> LostAttempt:
    """The dev server leaves the attempt's end and the retry's due time unset after a heartbeat
    timeout (the bench prints "?" then); the last heartbeat and the retry's events still tell."""
    return LostAttempt(info.activity_id, info.activity_type.name, _time(info.last_heartbeat_time),
                       _time(info.last_attempt_complete_time), _time(info.next_attempt_schedule_time))


async def watch_lost_attempt(handle: WorkflowHandle) -> LostAttempt:
    """Sample the run's pending activities until the one in flight at the kill is given up.

    It never returns if nothing was in flight: cancel it once the run is over.
    """
    last_beat: dict[str, datetime | None] = {}
    while True:
        described = await handle.describe()
        for info in described.raw_description.pending_activities:
            if info.attempt == 1:
                last_beat[info.activity_id] = _time(info.last_heartbeat_time)
            else:
                lost = _lost(info)
                return replace(lost, last_heartbeat=last_beat.get(info.activity_id, lost.last_heartbeat))
        await asyncio.sleep(SAMPLE_SECONDS)
