"""A history file that replays anywhere: every payload reference in it resolved.

History keeps references into the blob store: whole payloads over the threshold, and the large parts
(subtrees) of every activity input and result. A file exported as the server holds it therefore
replays only where that store is reachable, while the person debugging a run often has the file and
not the store (a laptop, a support ticket). ``starter.py history`` writes this form instead: each
payload as the worker reads it, so the file needs no store. Encryption is kept: a payload that was
encrypted is written encrypted again (with the current key), so the file never holds plaintext the
server did not, and replaying it needs the same keys as replaying the run.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from runtime.blob_gc import payloads_in
from runtime.payload_steps import decode_payloads, encrypt_payloads


async def self_contained(history: WorkflowHistory, converter: DataConverter, *,
                         encrypted: bool = True) -> WorkflowHistory:
    """``history`` with each payload the converter's codecs or store changed replaced by its
    readable form, re-encrypted when encryption is on (unless not ``encrypted``: a replay corpus
    file is plain, as tests/test_replay.py reads it). Payloads nothing changes (search attributes,
    small inline values) stay byte for byte."""
    events = [type(event)() for event in history.events]
    for copy, event in zip(events, history.events, strict=True):
        copy.CopyFrom(event)
        for payload in payloads_in(copy):
            [readable] = await decode_payloads(converter, [payload])
            if readable != payload:
                [written] = await encrypt_payloads(converter, [readable]) if encrypted else [readable]
                payload.CopyFrom(written)
    return WorkflowHistory(history.workflow_id, events)


def read_history_file(path: str, workflow_id: str | None = None) -> WorkflowHistory:
    """A history file (``starter.py history``, the Web UI's JSON download, ``temporal workflow show -o
    json``), named ``workflow_id``, else by the workflow ID its first event records, else by the file.
    Raises ``OSError`` or ``ValueError`` when it cannot be read."""
    try:
        recorded = WorkflowHistory.from_json(workflow_id or "", Path(path).read_text(encoding="utf-8"))
    except json_format.ParseError as error:  # not a ValueError: said as one
        raise ValueError(str(error)) from error
    if workflow_id:
        return recorded
    started = recorded.events[0] if recorded.events else None
    named = ""
    if started is not None and started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        named = started.workflow_execution_started_event_attributes.workflow_id
    return WorkflowHistory(named or f"the run in {path}", recorded.events)
