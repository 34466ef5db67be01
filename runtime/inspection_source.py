"""Where an inspection reads a run from: the server (the whole continue-as-new chain, and the
attempts still in flight) or a history file exported by ``starter.py history`` or the Web UI.

Runs are read one at a time: a long chain's histories are decoded and dropped in turn, so only
the inspection itself is held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus, WorkflowHistory
from temporalio.converter import DataConverter

from runtime.inspection import InspectionBuilder, PendingAttempt
from runtime.inspection_decode import decode_events, failure_text
from runtime.inspection_model import RunInspection
from workflows.contracts.research import WORKFLOW_TYPE, ResearchRequest, ResearchResult

# The run's own input and result, where its workflow type is known; others are read as JSON.
RUN_HINTS: dict[str, dict[str, type[Any]]] = {WORKFLOW_TYPE: {"input": ResearchRequest, "result": ResearchResult}}


Histories = AsyncIterator[WorkflowHistory] | Sequence[WorkflowHistory]


async def inspect_histories(histories: Histories,
                            converter: DataConverter, source: str,
                            pending: Sequence[PendingAttempt] = ()) -> RunInspection:
    """The inspection of a run chain's histories (first to last), read through ``converter``."""
    builder: InspectionBuilder | None = None
    async for history in _each(histories):
        if builder is None:
            builder = InspectionBuilder(history.workflow_id, source)
        started = history.events[0] if history.events else None
        kind = started.workflow_execution_started_event_attributes.workflow_type.name if started else ""
        builder.add_run(history.events, await decode_events(history.events, converter, RUN_HINTS.get(kind)))
    if builder is None:
        raise ValueError("no history to inspect")
    return builder.finish(pending)


async def _each(histories: Histories) -> AsyncIterator[WorkflowHistory]:
    if isinstance(histories, Sequence):
        for history in histories:
            yield history
    else:
        async for history in histories:
            yield history


async def inspect_run(client: Client, workflow_id: str, source: str,
                      description: WorkflowExecutionDescription | None = None) -> RunInspection:
    """The latest run of ``workflow_id`` with the runs it continued, and its attempts in flight
    (``description``: the run's, where the caller has just read it to check access)."""
    description = description or await client.get_workflow_handle(workflow_id).describe()
    pending: list[PendingAttempt] = []
    if description.status == WorkflowExecutionStatus.RUNNING:
        pending = [await attempt_in_flight(client.data_converter, info)
                   for info in description.raw_description.pending_activities]
    return await inspect_histories(chain(client, workflow_id, description.run_id), client.data_converter, source,
                                   pending)


async def chain(client: Client, workflow_id: str, latest_run: str) -> AsyncIterator[WorkflowHistory]:
    """Each run's history, from the first run of ``latest_run``'s continue-as-new chain to it."""
    run_id = await first_run_id(client, workflow_id, latest_run) or latest_run
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        yield history
        last = history.events[-1] if history.events else None
        if run_id == latest_run or last is None or \
                last.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def first_run_id(client: Client, workflow_id: str, run_id: str | None = None) -> str | None:
    """The first run of the continue-as-new chain that ``run_id`` (the latest, if None) is part of,
    as that run's start records it: one request, however long the chain. None: no history."""
    async for event in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events(page_size=1):
        return event.workflow_execution_started_event_attributes.first_execution_run_id or None
    return None


async def attempt_in_flight(converter: DataConverter, info: PendingActivityInfo) -> PendingAttempt:
    """A pending activity as the server describes it: history records an attempt only once it ends."""
    started = info.state in (PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
                             PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED)
    failure = await failure_text(converter, info.last_failure) if info.HasField("last_failure") else None
    return PendingAttempt(activity_id=info.activity_id, state="running" if started else "scheduled",
                          attempt=info.attempt,
                          last_started=info.last_started_time.ToDatetime(tzinfo=UTC)
                          if info.HasField("last_started_time") else None,
                          last_failure=failure)
