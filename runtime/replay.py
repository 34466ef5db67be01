"""Replaying histories against this code, and finding the event where a run diverged.

The replayer is the workers' (runtime/workflow_runner.py's sandbox, the workers' converter, every
workflow type in workflows/catalog.py), so a history replays here as it would on a new worker.
``starter.py replay`` uses it for one run and for a fleet (cli/fleet_replay.py).

Why a search for the event: the SDK's core says what did not match ("Activity type of scheduled
event 'web_search' does not match activity type of activity command 'chat'") but not where. A run
that replays up to the end of one workflow task replays up to the end of every earlier one, so
the first task whose commands this code does not repeat is found by replaying prefixes of the
history, cut after each task's recorded commands, in a binary search: about log2(tasks) replays,
only for a run that failed. The event named is the task's recorded command that the message names
(else its first), or the task's completion when it recorded none.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

if TYPE_CHECKING:
    from temporalio.worker import Replayer

E = EventType
MAX_MESSAGE = 600


@dataclass(frozen=True)
class Divergence:
    """Where and why a history stopped replaying: the event (None: not found), and the core's words."""

    event_id: int | None
    event: str  # "event 24 (activity task scheduled: web_search), in the workflow task completed at event 23"
    message: str


def replayer(converter: DataConverter) -> Replayer:
    """A replayer of every workflow type, as a worker with ``converter`` (the process's) runs them."""
    # Imported here: the workflows' code and the SDK's worker are heavy, and only a replay needs them.
    from temporalio.worker import Replayer

    from runtime.message_payloads import worker_converter
    from runtime.workflow_runner import workflow_runner
    from workflows.catalog import WORKFLOWS

    return Replayer(workflows=list(WORKFLOWS), data_converter=worker_converter(converter), runtime=_quiet(),
                    workflow_runner=workflow_runner())


@functools.cache
def _quiet() -> Runtime:
    """One runtime for the process's replayers, whose core does not also log each failure as a
    coloured Rust warning: our lines say it already."""
    return Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=TelemetryFilter("ERROR", "ERROR"))))


async def diverged(replaying: Replayer, history: WorkflowHistory, failure: BaseException) -> Divergence:
    """Where ``history``, which failed to replay with ``failure``, first diverges from this code."""
    message = failure_text(failure)
    events = history.events
    cuts = _task_ends(events)
    low, high = 0, len(cuts)  # the first failing cut is in cuts[low:high], or none of them fails
    while low < high:
        middle = (low + high) // 2
        outcome = await replaying.replay_workflow(WorkflowHistory(history.workflow_id, events[:cuts[middle]]),
                                                  raise_on_replay_failure=False)
        if outcome.replay_failure is None:
            low = middle + 1
        else:
            high = middle
    if low == len(cuts):
        return Divergence(None, "an event this search cannot name", message)
    completed = _task_completed_before(events, cuts[low])
    return _named(events, completed, message)


def _task_ends(events: list[HistoryEvent]) -> list[int]:
    """After each completed workflow task, the length of the history up to the next task (its commands
    and what happened since): the prefixes that end with that task done."""
    ends = []
    for index, event in enumerate(events):
        if event.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            end = index + 1
            while end < len(events) and events[end].event_type != E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                end += 1
            ends.append(end)
    return ends


def _task_completed_before(events: list[HistoryEvent], end: int) -> HistoryEvent:
    return next(event for event in reversed(events[:end]) if event.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)


def _named(events: list[HistoryEvent], completed: HistoryEvent, message: str) -> Divergence:
    """The task's recorded command the core's message names (by its quoted name), else its first."""
    commands = [event for event in events if _command_of(event) == completed.event_id]
    task = f"in the workflow task completed at event {completed.event_id}"
    if not commands:
        return Divergence(completed.event_id, f"event {completed.event_id} (the workflow task recorded no "
                                              "command; this code gives one)", message)
    named = next((event for event in commands if _name(event) and f"'{_name(event)}'" in message), commands[0])
    what = event_label(named) + (f": {_name(named)}" if _name(named) else "")
    return Divergence(named.event_id, f"event {named.event_id} ({what}), {task}", message)


def _command_of(event: HistoryEvent) -> int | None:
    """The workflow task completion that recorded this event as its command, if it is one."""
    field = event.WhichOneof("attributes")
    attributes = getattr(event, field) if field else None
    return getattr(attributes, "workflow_task_completed_event_id", None) or None


def _name(event: HistoryEvent) -> str:
    if event.HasField("activity_task_scheduled_event_attributes"):
        return event.activity_task_scheduled_event_attributes.activity_type.name
    if event.HasField("marker_recorded_event_attributes"):
        return event.marker_recorded_event_attributes.marker_name
    if event.HasField("timer_started_event_attributes"):
        return event.timer_started_event_attributes.timer_id
    return ""


def event_label(event: HistoryEvent) -> str:
    return E.Name(event.event_type).removeprefix("EVENT_TYPE_").lower().replace("_", " ")


def failure_text(failure: BaseException) -> str:
    """The replayer's failure as a sentence: the core reports it as Rust debug text. Its message is
    the text between ``message: "`` and the next unescaped quote, found by a plain scan."""
    text = " ".join(str(failure).split())
    start = text.find('message: "')
    if start < 0:
        return text[:MAX_MESSAGE]
    found, escaped = [], False
    for char in text[start + len('message: "'):]:
        if escaped:
            found.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            break
        else:
            found.append(char)
    return "".join(found)[:MAX_MESSAGE]
