"""The worker's converter (runtime/message_payloads.py): which decoding failures become a refused
message and which still fail the workflow task. The end-to-end proof is tests/test_hostile_payloads_e2e.py."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from runtime.converter import data_converter, with_driver
from runtime.encryption import EncryptionKeysMissing
from runtime.message_payloads import WorkerDataConverter, worker_converter
from storage.filesystem import FileSystemStorageDriver, PayloadStoreError
from workflows.contracts.undecodable import Undecodable
from workflows.research.review import InvalidFeedback, parse_feedback

KEYS = f"k1:{base64.b64encode(os.urandom(32)).decode()}"
IN_WORKFLOW = WorkflowSerializationContext(namespace="default", workflow_id="w")
IN_ACTIVITY = ActivitySerializationContext(namespace="default", activity_id="1", activity_type="chat",
                                           activity_task_queue="q", workflow_id="w",
                                           workflow_type="DeepResearchWorkflow", is_local=False)


def settings(home: Path, **values: str) -> Settings:
    return Settings.model_validate({"DEERFLOW_HOME": str(home), **values})


async def decode(converter: WorkerDataConverter, payloads: list[Payload]) -> list[object]:
    """What the SDK's worker does to a workflow activation's payloads, then the workflow's conversion."""
    payloads = await converter._decode_reference_payload_sequence(payloads)
    payloads = await converter._external_retrieve_payload_sequence(payloads)
    payloads = await converter._decode_payload_sequence(payloads)
    return converter.payload_converter.from_payloads(payloads)


async def test_a_bad_payload_among_good_ones_becomes_undecodable_in_the_workflows_context(tmp_path: Path) -> None:
    shared = data_converter(settings(tmp_path, DEERFLOW_ENCRYPTION_KEYS=KEYS))
    good, bad = await shared.with_context(IN_WORKFLOW).encode(["[ACCEPTED]", "[ACCEPTED]"])
    bad.data = bad.data[:-1] + bytes([bad.data[-1] ^ 1])
    worker = worker_converter(shared).with_context(IN_WORKFLOW)
    decoded = await decode(worker, [good, bad])
    assert decoded[0] == "[ACCEPTED]"
    assert isinstance(decoded[1], Undecodable) and "failed authentication" in decoded[1].reason
    with pytest.raises(InvalidFeedback, match="the payload could not be decoded"):
        parse_feedback(decoded[1])
    # An activity's result is decoded in the activity's context: its error stays as it was.
    with pytest.raises(ApplicationError, match="failed authentication"):
        await decode(worker_converter(shared).with_context(IN_ACTIVITY), [bad])


async def test_the_workers_own_faults_still_fail_the_task(tmp_path: Path) -> None:
    encrypted = await data_converter(settings(tmp_path, DEERFLOW_ENCRYPTION_KEYS=KEYS)).encode(["[ACCEPTED]"])
    keyless = worker_converter(data_converter(settings(tmp_path))).with_context(IN_WORKFLOW)
    with pytest.raises(EncryptionKeysMissing, match="DEERFLOW_ENCRYPTION_KEYS"):
        await decode(keyless, encrypted)
    # A reference into a store that is not there (unmounted, another DEERFLOW_HOME): retried, not refused.
    reference = await with_driver(FileSystemStorageDriver(tmp_path / "elsewhere"), threshold_bytes=1).encode(["x"])
    empty = worker_converter(data_converter(settings(tmp_path / "empty-home"))).with_context(IN_WORKFLOW)
    with pytest.raises(PayloadStoreError):
        await decode(empty, reference)
