"""A run's history written event by event, for the readers of history (the inspection) to be shown
what a real run rarely does on demand: a call retried twice and then failed, a hostile page, a
message from a forged sender. Payloads go through the converter given, as a worker's would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from workflows.contracts.research import WORKFLOW_TYPE

E = EventType
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class HistoryWriter:
    """Appends events one second apart; each method returns the new event's id."""

    def __init__(self, converter: DataConverter, workflow_id: str = "written-run") -> None:
        self.converter = converter
        self.workflow_id = workflow_id
        self.events: list[HistoryEvent] = []

    def _event(self, kind: int) -> HistoryEvent:
        event = HistoryEvent(event_id=len(self.events) + 1, event_type=kind)  # type: ignore[arg-type]
        event.event_time.FromDatetime(START + timedelta(seconds=len(self.events)))
        self.events.append(event)
        return event

    async def started(self, request: Any, workflow_type: str = WORKFLOW_TYPE) -> int:
        event = self._event(E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
        attributes = event.workflow_execution_started_event_attributes
        attributes.workflow_type.name = workflow_type
        attributes.workflow_id = self.workflow_id
        attributes.original_execution_run_id = attributes.first_execution_run_id = "run-1"
        attributes.input.payloads.extend(await self.converter.encode([request]))
        return event.event_id

    async def scheduled(self, activity: str, request: Any, summary: str) -> int:
        event = self._event(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        attributes = event.activity_task_scheduled_event_attributes
        attributes.activity_type.name = activity
        attributes.activity_id = str(event.event_id)
        attributes.input.payloads.extend(await self.converter.encode([request]))
        [encoded] = await self.converter.encode([summary])
        event.user_metadata.summary.CopyFrom(encoded)
        return event.event_id

    async def attempt(self, scheduled: int, attempt: int = 1, last_failure: str | None = None) -> int:
        event = self._event(E.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        attributes = event.activity_task_started_event_attributes
        attributes.scheduled_event_id, attributes.attempt, attributes.identity = scheduled, attempt, "4242@worker-a"
        if last_failure is not None:
            attributes.last_failure.CopyFrom(await self.failure(last_failure))
        return event.event_id

    async def completed(self, scheduled: int, result: Any) -> int:
        event = self._event(E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
        attributes = event.activity_task_completed_event_attributes
        attributes.scheduled_event_id = scheduled
        attributes.result.payloads.extend(await self.converter.encode([result]))
        return event.event_id

    async def failed(self, scheduled: int, message: str) -> int:
        event = self._event(E.EVENT_TYPE_ACTIVITY_TASK_FAILED)
        event.activity_task_failed_event_attributes.scheduled_event_id = scheduled
        event.activity_task_failed_event_attributes.failure.CopyFrom(await self.failure(message))
        return event.event_id

    async def signaled(self, name: str, *arguments: Any) -> int:
        event = self._event(E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
        event.workflow_execution_signaled_event_attributes.signal_name = name
        event.workflow_execution_signaled_event_attributes.input.payloads.extend(
            await self.converter.encode(list(arguments)))
        return event.event_id

    async def failure(self, message: str) -> Failure:
        failure = Failure()
        await self.converter.encode_failure(ApplicationError(message, type="ModelProviderError"), failure)
        return failure

    def history(self) -> WorkflowHistory:
        return WorkflowHistory(self.workflow_id, list(self.events))
