"""Who decided what, and when: the messages a run received, read from its history.

Signals and updates carry their sender as a second argument when they came through our doors
(workflows/contracts/decisions.py: the CLI's OS user or ``--as``, the API token's holder); a cancel carries it
in its reason. Without one, the message came from outside our doors (the temporal CLI, the Web UI).
An update's answer (accepted, or why it was not) is recorded with it. Every message is shown as
the sender wrote it: untrusted text, shown as text.
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Any

from temporalio.api.history.v1 import HistoryEvent

from runtime.inspection_decode import Unreadable
from runtime.inspection_model import Message
from runtime.inspection_parts import as_json
from workflows.contracts.decisions import InvalidActor, actor_of, actor_of_cancel

if TYPE_CHECKING:
    from runtime.inspection import InspectionBuilder


class Messages:
    """Adds each message to the run and to the stage it most likely answers."""

    def __init__(self, builder: InspectionBuilder) -> None:
        self.builder = builder
        self.updates: dict[str, Message] = {}  # by update id, until its outcome

    def signaled(self, event: HistoryEvent) -> None:
        name = event.workflow_execution_signaled_event_attributes.signal_name
        self._add(event, f"signal {name}", *_said(self.builder.value(event, "input")))

    def update_accepted(self, event: HistoryEvent) -> None:
        request = event.workflow_execution_update_accepted_event_attributes.accepted_request
        message = self._add(event, f"update {request.input.name}", *_said(self.builder.value(event, "input")))
        self.updates[request.meta.update_id] = message

    def update_completed(self, event: HistoryEvent) -> None:
        message = self.updates.pop(event.workflow_execution_update_completed_event_attributes.meta.update_id, None)
        if message is None:
            return
        failure = self.builder.value(event, "failure")
        if failure is not None:
            message.outcome = f"failed: {failure}"
            return
        answer = self.builder.value(event, "result")
        first = answer[0] if isinstance(answer, list) and answer else None
        if isinstance(first, dict) and "message" in first:
            message.outcome = ("accepted: " if first.get("accepted") else "not accepted: ") + str(first["message"])
        elif first is not None:
            message.outcome = as_json(first)

    def cancel_requested(self, event: HistoryEvent) -> None:
        reason = event.workflow_execution_cancel_requested_event_attributes.cause
        self._add(event, "cancel request", "cancel the run", str(actor_of_cancel(reason or None)))

    def terminated(self, event: HistoryEvent) -> None:
        attributes = event.workflow_execution_terminated_event_attributes
        self._add(event, "terminate", attributes.reason or "(no reason given)",
                  f"{attributes.identity or 'unknown'} (temporal)")

    def _add(self, event: HistoryEvent, kind: str, text: str, by: str) -> Message:
        builder = self.builder
        message = Message(at=event.event_time.ToDatetime(tzinfo=UTC), event_id=event.event_id,
                          run=builder.run, kind=kind, text=text, by=by)
        builder.inspection.messages.append(message)
        stage = builder.open_wait() or builder.current
        if stage is not None:
            stage.messages.append(message)
        return message


def _said(arguments: Any) -> tuple[str, str]:
    """A message's text (its first argument) and its sender (its second, if any), as shown."""
    if isinstance(arguments, Unreadable):
        return f"(cannot be read: {arguments.reason})", "unknown (its payload cannot be read)"
    if not isinstance(arguments, list) or not arguments:
        return "", str(actor_of(None))
    first = arguments[0]
    text = first if isinstance(first, str) else as_json(first)
    try:
        sender = str(actor_of(arguments[1] if len(arguments) > 1 else None))
    except InvalidActor:
        sender = "unknown (a sender that is not a name and a door)"
    return text, sender
