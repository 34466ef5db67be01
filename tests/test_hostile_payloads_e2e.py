"""Hostile and unreadable payloads on an encrypted deployment with the blob store (issue #19 items 3-5).

Item 3, broken signals and updates: a real worker process (encryption on, filesystem store) holds
a run paused at plan review. An outsider with a plain client (no keys, no codec) sends hand-made
payloads: a storage reference to a blob this store never wrote, tampered ciphertext, ciphertext
under an unknown key id, a forged subtree reference, and an update carrying tampered ciphertext.
The SDK decodes them in the worker before the workflow sees them; each used to wedge the run (a
workflow task failing for ever) or fail it. Now each signal is an "ignored" event naming why, the
update is rejected to its caller, no workflow task fails, and the run is reviewed and completes.

Item 5, blob clean-up: workflows of a made-up type on a queue nobody polls, whose inputs gc cannot
read, and a broken signal in a live run of ours: ``starter.py blobs gc`` skips and lists them,
deletes only the orphan, prints no traceback, and the live run still completes with its blobs.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from config.settings import load_settings
from runtime.blob_gc import ENCODED_REFERENCE_MARKER, FROM_CLIENTS, REFERENCE_TYPE, payloads_in, reference_of
from runtime.connection import connect_when_ready
from runtime.converter import data_converter, with_driver
from runtime.encryption import EncryptionCodec, encryption_codec
from storage.filesystem import FileSystemStorageDriver
from storage.subtrees import ENCODING as SUBTREES
from storage.subtrees import references_in
from tests.support.processes import DevServer, WorkerProcess, run_starter, start_worker
from tests.support.runs import QUESTION, run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult
from workflows.contracts.status import Awaiting, RunStatus

pytestmark = pytest.mark.timeout(240)

KEY = os.urandom(32)
KEYS = f"live:{base64.b64encode(KEY).decode()}"
UNDECODABLE = "the payload could not be decoded"


def encrypted(value: str, key_id: str = "live", key: bytes = KEY) -> Payload:
    [plain] = pydantic_data_converter.payload_converter.to_payloads([value])
    return EncryptionCodec({key_id: key})._encrypt(plain)


def tampered(value: str) -> Payload:
    payload = encrypted(value)
    payload.data = payload.data[:-1] + bytes([payload.data[-1] ^ 1])
    return payload


async def reference_to_a_blob_elsewhere(root: Path) -> Payload:
    """A genuine storage reference (the right driver name and claim) whose blob is in another store."""
    converter = with_driver(FileSystemStorageDriver(root), threshold_bytes=1)
    [payload] = await converter.encode(["[ACCEPTED]"])
    return payload


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"DEERFLOW_HOME": str(tmp_path_factory.mktemp("home")), "DEERFLOW_ENCRYPTION_KEYS": KEYS,
            "DEERFLOW_PAYLOAD_STORE": "filesystem", "DEERFLOW_PAYLOAD_THRESHOLD_BYTES": "2048"}


@pytest.fixture(scope="module")
async def keyed(dev_server: DevServer, env: dict[str, str]) -> Client:
    return await connect_when_ready(dev_server.address, data_converter=data_converter(load_settings(env)))


@pytest.fixture(scope="module")
async def outsider(dev_server: DevServer) -> Client:
    """Someone who may signal runs but has neither the keys nor the store: payloads go as given."""
    return await connect_when_ready(dev_server.address)


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, keyed: Client, env: dict[str, str],
                 tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, keyed, tmp_path_factory.mktemp("worker") / "worker.log", **env)
    yield process
    process.stop()


async def status_of(handle: WorkflowHandle) -> RunStatus:
    return await handle.query("status", result_type=RunStatus)


async def until(handle: WorkflowHandle, predicate, timeout: float = 90) -> RunStatus:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        status = await status_of(handle)
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"status never matched: {status.phase} {status.events[-3:]}"
        await asyncio.sleep(0.3)


def ignored(status: RunStatus) -> list[str]:
    return [event.message for event in status.events if event.kind == "ignored"]


async def test_broken_signals_and_updates_are_refused_and_the_run_goes_on(
    worker: WorkerProcess, keyed: Client, outsider: Client, tmp_path: Path,
) -> None:
    handle = await keyed.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("broken-msg"),
                                        task_queue=TASK_QUEUE, result_type=ResearchResult)
    await until(handle, lambda s: s.awaiting is Awaiting.PLAN_FEEDBACK)
    raw = outsider.get_workflow_handle(handle.id)
    sent = [
        ("plan_feedback", await reference_to_a_blob_elsewhere(tmp_path / "elsewhere")),
        ("plan_feedback", tampered("[ACCEPTED]")),
        ("plan_feedback", encrypted("[ACCEPTED]", key_id="forged", key=os.urandom(32))),
        ("clarification_answer", Payload(metadata={"encoding": SUBTREES}, data=b'{"$subtree":"' + b"0" * 64 + b'"}')),
    ]
    for number, (name, payload) in enumerate(sent, start=1):
        await raw.signal(name, RawValue(payload))
        status = await until(handle, lambda s, n=number: len(ignored(s)) == n)
        assert ignored(status)[-1].startswith(f"{name}: {UNDECODABLE}"), ignored(status)
        assert status.awaiting is Awaiting.PLAN_FEEDBACK, "a broken signal must leave the run waiting"

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await raw.execute_update("review_plan", RawValue(tampered("[ACCEPTED]")))
    # Rejected to its caller; the reason is encrypted like every failure of an encrypted deployment.
    assert isinstance(refused.value.cause, ApplicationError) and refused.value.cause.type == "InvalidFeedback"
    assert (await status_of(handle)).awaiting is Awaiting.PLAN_FEEDBACK

    outcome = await keyed.get_workflow_handle(handle.id).execute_update("review_plan", "[ACCEPTED]")
    assert "accepted" in str(outcome).lower()
    assert (await handle.result()).outcome is Outcome.REPORT
    history = await handle.fetch_history()
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [event.event_type for event in history.events]
    log = worker.log_path.read_text()
    assert log.count("could not be decoded; the workflow refuses it") >= len(sent) + 1, log[-3000:]


def blobs_gc(dev_server: DevServer, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **env, "TEMPORAL_ADDRESS": dev_server.address}
    return run_starter(environment, "blobs", "gc", "--older-than", "1")


async def test_blob_gc_skips_what_it_cannot_read_and_keeps_what_a_live_run_needs(
    dev_server: DevServer, worker: WorkerProcess, keyed: Client, outsider: Client, env: dict[str, str],
) -> None:
    handle = await keyed.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("live"),
                                        task_queue=TASK_QUEUE, result_type=ResearchResult)
    await until(handle, lambda s: s.awaiting is Awaiting.PLAN_FEEDBACK)
    hostile = {
        "codec-encoded storage reference": Payload(metadata={"encoding": b"binary/encrypted",
                                                     ENCODED_REFERENCE_MARKER: b"true"}, data=b"opaque"),
        "cannot be decrypted": encrypted('{"question": "x"}', key_id="forged", key=os.urandom(32)),
        "does not parse": Payload(metadata={"encoding": b"json/protobuf", "messageType": REFERENCE_TYPE},
                                  data=b"{not json"),
    }
    hostile_ids = []
    for payload in hostile.values():  # never-ending: nobody polls their queue
        started = await outsider.start_workflow("MadeUpWorkflow", RawValue(payload), id=run_id("hostile"),
                                                task_queue=run_id("nobody-polls"))
        hostile_ids.append(started.id)
    await outsider.get_workflow_handle(handle.id).signal("plan_feedback", RawValue(hostile["cannot be decrypted"]))
    await until(handle, lambda s: len(ignored(s)) == 1)

    blobs = Path(env["DEERFLOW_HOME"]) / "blobs"
    orphan = blobs / "ab" / ("ab" + "0" * 62)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"no run names this")
    needed = await blobs_named_by(handle, env)
    assert needed, "the live run stored blobs"
    for path in blobs.glob("??/*"):  # all old enough to go, unless a run names them
        os.utime(path, (0, 0))

    done = blobs_gc(dev_server, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Deleted " in done.stdout and "Skipped " in done.stdout, done.stdout
    for workflow_id in [*hostile_ids, handle.id]:
        assert workflow_id in done.stdout, done.stdout
    for why in hostile:
        assert why in done.stdout, done.stdout
    assert not orphan.exists()
    assert {digest for digest in needed if not (blobs / digest[:2] / digest).exists()} == set()

    worker.stop()  # a fresh worker, with no blob cached, reads the rest of the run from the store
    fresh = await start_worker(dev_server, keyed, worker.log_path, **env)
    try:
        await keyed.get_workflow_handle(handle.id).execute_update("review_plan", "[ACCEPTED]")
        assert (await handle.result()).outcome is Outcome.REPORT
    finally:
        fresh.stop()


async def blobs_named_by(handle: WorkflowHandle, env: dict[str, str]) -> set[str]:
    """The blobs a run's history names (whole payloads, and subtrees inside what our worker wrote)."""
    codec = encryption_codec(load_settings(env))
    assert codec is not None
    history = await handle.fetch_history()
    named = set()
    for event in history.events:
        if event.event_type in FROM_CLIENTS:
            continue
        for payload in payloads_in(event):
            reference = reference_of(payload)
            if reference is not None:
                named.add(reference.claim_data["hash_value"])
            else:
                named |= references_in((await codec.decode([payload]))[0])
    return named
