"""Reading a run's history for crash tests and benchmarks: what ran, how often, and who did it.

After a crash the question is never only "did the run finish?" but "did it redo work it had
already done?" and "how soon did it move again?". The history answers both exactly: every
activity attempt leaves a Started event with its attempt number, and every completed task names
the worker that completed it (``identity``, by default ``pid@hostname``) and when.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from temporalio.api.enums.v1 import EventType, TaskQueueType, TimeoutType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

from workflows.contracts.chat import ChatResponse
from workflows.contracts.research import TASK_QUEUE
from workflows.contracts.usage import Usage

SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
FAILED = EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
TIMED_OUT = EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
WORKFLOW_TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
PROGRESS = (COMPLETED, WORKFLOW_TASK_COMPLETED)


def activity_events(history: WorkflowHistory) -> dict[str, list[HistoryEvent]]:
    """Per activity ID: its scheduled, started and completed events, in history order."""
    events: dict[str, list[HistoryEvent]] = {}
    scheduled_ids: dict[int, str] = {}
    for event in history.events:
        if event.event_type == SCHEDULED:
            activity_id = event.activity_task_scheduled_event_attributes.activity_id
            scheduled_ids[event.event_id] = activity_id
            events.setdefault(activity_id, []).append(event)
        elif event.event_type == STARTED:
            events[scheduled_ids[event.activity_task_started_event_attributes.scheduled_event_id]].append(event)
        elif event.event_type == COMPLETED:
            events[scheduled_ids[event.activity_task_completed_event_attributes.scheduled_event_id]].append(event)
    return events


def activity_types(history: WorkflowHistory) -> dict[str, str]:
    """Activity ID -> activity type name (``chat``, ``web_search`` ...), for readable failures."""
    return {
        event.activity_task_scheduled_event_attributes.activity_id:
            event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events if event.event_type == SCHEDULED
    }


def completed_activity_ids(history: WorkflowHistory) -> set[str]:
    """Activities whose result is already in history: a correct recovery never runs them again."""
    return {activity_id for activity_id, events in activity_events(history).items()
            if any(event.event_type == COMPLETED for event in events)}


def start_attempts(events: Iterable[HistoryEvent]) -> list[int]:
    return [event.activity_task_started_event_attributes.attempt for event in events if event.event_type == STARTED]


def assert_not_rerun(completed_before: set[str], history: WorkflowHistory) -> None:
    """Each activity completed before the crash was scheduled once and started once, on attempt 1."""
    after = activity_events(history)
    names = activity_types(history)
    for activity_id in sorted(completed_before, key=int):
        kinds = [event.event_type for event in after[activity_id]]
        assert kinds.count(SCHEDULED) == 1, f"activity {activity_id} ({names[activity_id]}) was scheduled again"
        assert start_attempts(after[activity_id]) == [1], (
            f"activity {activity_id} ({names[activity_id]}) ran again: attempts {start_attempts(after[activity_id])}")


def retried_activities(history: WorkflowHistory) -> dict[str, tuple[str, int]]:
    """Activity ID -> (type, attempt) for every activity whose recorded attempt is above 1."""
    names = activity_types(history)
    return {activity_id: (names[activity_id], attempt)
            for activity_id, events in activity_events(history).items()
            for attempt in start_attempts(events) if attempt > 1}


def failure_cause(failure: Failure) -> str:
    """What ended an attempt, in a word: ``timeout:<kind>`` for a timeout the server declared (a
    heartbeat timeout when it gave up on a worker), else the failure's type (``WorkerLost`` when a
    restarted worker reclaimed the attempt), else its message."""
    if failure.HasField("timeout_failure_info"):
        return f"timeout:{TimeoutType.Name(failure.timeout_failure_info.timeout_type)}"
    return failure.application_failure_info.type or failure.message or "unknown"


def retry_causes(history: WorkflowHistory) -> dict[str, str]:
    """Activity ID -> what ended its previous attempt (:func:`failure_cause`), for every attempt above 1."""
    return {activity_id: failure_cause(event.activity_task_started_event_attributes.last_failure)
            for activity_id, events in activity_events(history).items() for event in events
            if event.event_type == STARTED and event.activity_task_started_event_attributes.attempt > 1}


def retries_by_cause(history: WorkflowHistory) -> Counter[str]:
    """Attempts after the first, counted by what ended the attempt before the recorded one.

    History keeps one Started event per activity, for its last attempt, and with it only the
    failure of the attempt before; so an activity retried several times counts all its retries
    under that one cause (the failures of the earlier attempts are not recorded).
    """
    counts: Counter[str] = Counter()
    for event in history.events:
        attributes = event.activity_task_started_event_attributes
        if event.event_type == STARTED and attributes.attempt > 1:
            counts[failure_cause(attributes.last_failure)] += attributes.attempt - 1
    return counts


def given_up(history: WorkflowHistory) -> Counter[str]:
    """Activities that ended without a result (no retry left), by what ended their last attempt."""
    counts: Counter[str] = Counter()
    for event in history.events:
        if event.event_type == FAILED:
            counts[failure_cause(event.activity_task_failed_event_attributes.failure)] += 1
        elif event.event_type == TIMED_OUT:
            counts[failure_cause(event.activity_task_timed_out_event_attributes.failure)] += 1
    return counts


async def completed_once_problems(history: WorkflowHistory, converter: DataConverter) -> list[str]:
    """What shows a run doing work twice: an activity with two results, a model turn (a ``chat``,
    named by its summary: agent, step and turn) completed twice, or a reporter that did not
    complete exactly once. Empty for a run that did everything once."""
    summaries: dict[str, str] = {}
    for event in history.events:
        if event.event_type == SCHEDULED and event.user_metadata.HasField("summary"):
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == "chat":
                [summaries[attributes.activity_id]] = await converter.decode([event.user_metadata.summary], [str])
    problems = []
    turns: Counter[str] = Counter()
    for activity_id, events in activity_events(history).items():
        completions = sum(1 for event in events if event.event_type == COMPLETED)
        if completions > 1:
            problems.append(f"activity {activity_id} completed {completions} times")
        if activity_id in summaries:
            turns[summaries[activity_id]] += completions
    problems += [f"the model turn {turn!r} completed {count} times" for turn, count in turns.items() if count > 1]
    if turns["reporter"] != 1:
        problems.append(f"the reporter's turn completed {turns['reporter']} times")
    return problems


async def model_turns(history: WorkflowHistory, converter: DataConverter) -> list[tuple[str, Usage]]:
    """Each completed model turn (a ``chat``) of the run, in history order: its summary (agent, step
    and turn: ``researcher · step 2 · turn 1``) and the usage its result reported."""
    summaries: dict[int, str] = {}
    chats = {activity_id for activity_id, kind in activity_types(history).items() if kind == "chat"}
    turns = []
    for event in history.events:
        if event.event_type == SCHEDULED and event.activity_task_scheduled_event_attributes.activity_id in chats:
            [summaries[event.event_id]] = await converter.decode([event.user_metadata.summary], [str])
        elif event.event_type == COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            if attributes.scheduled_event_id in summaries:
                [response] = await converter.decode(attributes.result.payloads, [ChatResponse])
                turns.append((summaries[attributes.scheduled_event_id], response.usage))
    return turns


def event_time(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


def _identity(event: HistoryEvent) -> str:
    if event.event_type == COMPLETED:
        return process_of(event.activity_task_completed_event_attributes.identity)
    return process_of(event.workflow_task_completed_event_attributes.identity)


def first_progress(history: WorkflowHistory, since: datetime, identity: str | None = None) -> HistoryEvent | None:
    """The first completed activity or workflow task at or after ``since`` (by ``identity``, if given).

    That is the moment a recovered run demonstrably moved again: a worker finished a piece of work
    and the server recorded it.
    """
    for event in history.events:
        if (event.event_type in PROGRESS and event_time(event) >= since
                and (identity is None or _identity(event) == identity)):
            return event
    return None


def worker_identity(pid: int) -> str:
    """The process part of a worker's identity, ``pid@hostname`` (see :func:`process_of`)."""
    return f"{pid}@{socket.gethostname()}"


def process_of(identity: str) -> str:
    """The worker process an identity names: our workers append their build to the SDK's
    ``pid@hostname`` (runtime/build_info.py), which tells processes apart; the build does not."""
    return identity.split(" ", 1)[0]


async def wait_for_poller(client: Client, identity: str, timeout: float = 90.0) -> None:
    """Wait until a worker with ``identity`` polls the workflow task queue.

    ``has_worker`` is not enough after a kill: the server keeps listing the dead worker's poller
    for a while, so it would report "a worker is there" before the new one has connected.
    """
    deadline = time.monotonic() + timeout
    request = DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=TASK_QUEUE),
                                       task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
    while True:
        response = await client.workflow_service.describe_task_queue(request)
        if any(process_of(poller.identity) == identity for poller in response.pollers):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no poller with identity {identity!r} after {timeout} s")
        await asyncio.sleep(0.2)


def tool_batches(history: WorkflowHistory) -> list[int]:
    """How many tool activities were scheduled after each model turn, before the next one."""
    batches = [0]
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == "chat":
                batches.append(0)
            else:
                batches[-1] += 1
    return batches


def most_pending(history: WorkflowHistory) -> int:
    """The most activities scheduled and not yet finished at any point of the run."""
    pending = peak = 0
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            pending += 1
            peak = max(peak, pending)
        elif any(event.HasField(f"activity_task_{end}_event_attributes")
                 for end in ("completed", "failed", "timed_out", "canceled")):
            pending -= 1
    return peak


HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def load(path: Path) -> WorkflowHistory:
    """A recorded reference history (``tests/histories/*.json``), named after its file."""
    return WorkflowHistory.from_json(path.stem, path.read_text(encoding="utf-8"))
