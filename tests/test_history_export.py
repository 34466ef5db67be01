"""A self-contained history export (runtime/history_export.py): every blob-store reference resolved,
encryption kept, everything else byte for byte. The end-to-end check (``starter.py history`` then
``replay --file`` with no store at all) is in tests/test_e2e.py.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from config.settings import Settings
from runtime.blob_gc import payloads_in
from runtime.converter import data_converter
from runtime.encryption import ENCODING as ENCRYPTED
from runtime.history_export import self_contained
from storage.subtrees import ENCODING as SUBTREES
from workflows.contracts.chat import ChatMessage, ChatRequest

SECRET = "Tidal lagoon levelised cost per megawatt hour"
REQUEST = ChatRequest(prompt="researcher", messages=[ChatMessage(role="user", content=f"{SECRET}. " + "Why? " * 200)])
KEY = base64.b64encode(os.urandom(32)).decode()


def settings(home: Path, **extra: object) -> Settings:
    return Settings.model_validate({"DEERFLOW_HOME": str(home), **extra})


def history_with(result: Payload, search_attribute: Payload) -> WorkflowHistory:
    started, completed = HistoryEvent(event_id=1), HistoryEvent(event_id=2)
    attributes = started.workflow_execution_started_event_attributes
    attributes.search_attributes.indexed_fields["DeerFlowPhase"].CopyFrom(search_attribute)
    attributes.header.fields["tracing"].CopyFrom(Payload(data=b"header"))
    completed.activity_task_completed_event_attributes.result.payloads.append(result)
    return WorkflowHistory("export-test", [started, completed])


def test_every_payload_is_found_in_fields_lists_and_maps() -> None:
    history = history_with(Payload(data=b"result"), Payload(data=b"phase"))
    failed = HistoryEvent(event_id=3)
    failed.activity_task_failed_event_attributes.failure.encoded_attributes.CopyFrom(Payload(data=b"failure"))
    found = sorted(payload.data for event in [*history.events, failed] for payload in payloads_in(event))
    assert found == [b"failure", b"header", b"phase", b"result"]


async def test_references_are_resolved_and_the_file_needs_no_store(tmp_path: Path) -> None:
    [result] = await data_converter(settings(tmp_path / "worker")).encode([REQUEST])
    assert result.metadata["encoding"] == SUBTREES and SECRET.encode() not in result.data
    phase = Payload(metadata={"encoding": b"json/plain", "type": b"Keyword"}, data=b'"planning"')
    original = history_with(result, phase)
    exported = await self_contained(original, data_converter(settings(tmp_path / "worker")))

    [resolved] = list(payloads_in(exported.events[1]))
    assert resolved.metadata["encoding"] == b"json/plain" and SECRET.encode() in resolved.data
    elsewhere = data_converter(settings(tmp_path / "elsewhere"))  # an empty store
    assert await elsewhere.decode([resolved], [ChatRequest]) == [REQUEST]
    # What needed nothing resolved is untouched, and the original history is not modified.
    assert exported.events[0] == original.events[0]
    assert list(payloads_in(original.events[1])) == [result]


async def test_an_encrypted_run_is_exported_encrypted(tmp_path: Path) -> None:
    keyed = settings(tmp_path / "worker", DEERFLOW_ENCRYPTION_KEYS=f"k1:{KEY}")
    [result] = await data_converter(keyed).encode([REQUEST])
    exported = await self_contained(history_with(result, Payload(data=b"x")), data_converter(keyed))

    [resolved] = list(payloads_in(exported.events[1]))
    assert resolved.metadata["encoding"] == ENCRYPTED and SECRET.encode() not in resolved.SerializeToString()
    elsewhere = data_converter(settings(tmp_path / "elsewhere", DEERFLOW_ENCRYPTION_KEYS=f"k1:{KEY}"))
    assert await elsewhere.decode([resolved], [ChatRequest]) == [REQUEST]
