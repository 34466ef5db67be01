"""Every payload and failure of a run's history that the inspection shows, decoded up front.

Through the one data converter (runtime/converter.py), as the worker read them: blob-store
references fetched, subtrees put back, encryption opened with the operator's keys. A run's calls
are decoded a few at a time, so a long run on a remote store (S3) is not read one blob after
another; the builder (runtime/inspection.py) then walks the events with everything at hand.

A payload or failure that cannot be read (no keys, a blob gone, a client's malformed message)
becomes :class:`Unreadable` with the reason: the inspection shows it and goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, FailureError

from runtime.activity_io import INPUTS, RESULTS

DECODES_AT_ONCE = 16
MAX_CAUSES = 5  # a failure's chain of causes shown; deeper ones add nothing a person reads
E = EventType

# (event id, slot): slot is "input", "result", "summary" or "failure".
Key = tuple[int, str]


@dataclass(frozen=True)
class Unreadable:
    """A payload the converter could not turn back into a value, and why."""

    reason: str


async def decode_events(events: Sequence[HistoryEvent], converter: DataConverter,
                        hints: dict[str, type[Any]] | None = None) -> dict[Key, Any]:
    """The decoded values of ``events`` by (event id, slot); ``hints`` types the run's own input and result."""
    jobs: dict[Key, Callable[[], Awaitable[Any]]] = {}
    activity_of: dict[int, str] = {}  # scheduled event id -> activity type
    for event in events:
        for slot, job in _jobs(event, converter, activity_of, hints or {}):
            jobs[(event.event_id, slot)] = job
    gate = asyncio.Semaphore(DECODES_AT_ONCE)

    async def bounded(job: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await job()

    values = await asyncio.gather(*(bounded(job) for job in jobs.values()))
    return dict(zip(jobs, values, strict=True))


def _jobs(event: HistoryEvent, converter: DataConverter, activity_of: dict[int, str],
          hints: dict[str, type[Any]]) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """What to decode in one event, by slot."""
    kind = event.event_type
    jobs: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
    if event.HasField("user_metadata") and event.user_metadata.HasField("summary"):
        jobs.append(("summary", lambda: value_of(converter, [event.user_metadata.summary], str)))
    if kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        attributes = event.activity_task_scheduled_event_attributes
        activity_of[event.event_id] = attributes.activity_type.name
        hint = INPUTS.get(attributes.activity_type.name)
        jobs.append(("input", lambda: value_of(converter, attributes.input.payloads, hint)))
    elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
        attributes = event.activity_task_completed_event_attributes
        hint = RESULTS.get(activity_of.get(attributes.scheduled_event_id, ""))
        jobs.append(("result", lambda: value_of(converter, attributes.result.payloads, hint)))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        jobs.append(("input", lambda: value_of(converter, payloads, hints.get("input"))))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        payloads = event.workflow_execution_completed_event_attributes.result.payloads
        jobs.append(("result", lambda: value_of(converter, payloads, hints.get("result"))))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        payloads = event.workflow_execution_signaled_event_attributes.input.payloads
        jobs.append(("input", lambda: values_of(converter, payloads)))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        payloads = event.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads
        jobs.append(("input", lambda: values_of(converter, payloads)))
    elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
        outcome = event.workflow_execution_update_completed_event_attributes.outcome
        if outcome.HasField("failure"):
            jobs.append(("failure", lambda: failure_text(converter, outcome.failure)))
        else:
            jobs.append(("result", lambda: values_of(converter, outcome.success.payloads)))
    if (failure := failure_of(event)) is not None:
        jobs.append(("failure", lambda: failure_text(converter, failure)))
    return jobs


def failure_of(event: HistoryEvent) -> Failure | None:
    """The failure an event records, if any: an attempt's, the previous attempt's, the run's."""
    for field, name in (("activity_task_failed_event_attributes", "failure"),
                        ("activity_task_timed_out_event_attributes", "failure"),
                        ("activity_task_started_event_attributes", "last_failure"),
                        ("workflow_task_failed_event_attributes", "failure"),
                        ("workflow_execution_failed_event_attributes", "failure")):
        if event.HasField(field) and getattr(event, field).HasField(name):
            return getattr(getattr(event, field), name)
    return None


async def value_of(converter: DataConverter, payloads: Sequence[Payload], hint: type[Any] | None) -> Any:
    """The first payload as ``hint`` (JSON values without one); None when there is none."""
    if not payloads:
        return None
    try:
        [value] = await converter.decode(payloads[:1], [hint] if hint is not None else None)
    except Exception as error:  # any payload may be a client's: never let one stop the inspection
        if hint is None:
            return Unreadable(_reason(error))
        return await value_of(converter, payloads, None)  # not its type (a bad request): shown as it is
    return value


async def values_of(converter: DataConverter, payloads: Sequence[Payload]) -> list[Any] | Unreadable:
    """Every payload of a message, as JSON values (a message's arguments are the sender's, of any shape)."""
    try:
        return await converter.decode(payloads) if payloads else []
    except Exception as error:
        return Unreadable(_reason(error))


async def failure_text(converter: DataConverter, failure: Failure) -> str:
    """A failure and its causes as one line each ("ModelProviderError: 503 …"), its attributes
    decrypted when the failure converter encoded them."""
    copy = Failure()
    copy.CopyFrom(failure)
    try:
        error: BaseException | None = await converter.decode_failure(copy)
    except Exception as problem:
        return f"{failure.message} (its details cannot be read: {_reason(problem)})"
    lines: list[str] = []
    while error is not None and len(lines) < MAX_CAUSES:
        kind = error.type if isinstance(error, ApplicationError) and error.type else type(error).__name__
        message = error.message if isinstance(error, FailureError) else str(error)
        lines.append(f"{kind}: {message}")
        error = error.__cause__
    return "\n  caused by ".join(lines)


def _reason(error: BaseException) -> str:
    text = error.message if isinstance(error, FailureError) else str(error)
    return f"{type(error).__name__}: {text.strip().partition(chr(10))[0][:300]}"
