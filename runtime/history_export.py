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

from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from runtime.blob_gc import payloads_in
from runtime.payload_steps import decode_payloads, encrypt_payloads


async def self_contained(history: WorkflowHistory, converter: DataConverter) -> WorkflowHistory:
    """``history`` with each payload the converter's codecs or store changed replaced by its
    readable form, re-encrypted when encryption is on. Payloads nothing changes (search attributes,
    small inline values) stay byte for byte."""
    events = [type(event)() for event in history.events]
    for copy, event in zip(events, history.events, strict=True):
        copy.CopyFrom(event)
        for payload in payloads_in(copy):
            [readable] = await decode_payloads(converter, [payload])
            if readable != payload:
                [written] = await encrypt_payloads(converter, [readable])
                payload.CopyFrom(written)
    return WorkflowHistory(history.workflow_id, events)
