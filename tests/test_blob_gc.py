"""``blobs gc`` deletes the blobs of runs the server no longer keeps, and nothing else (runtime/blob_gc.py).

On the dev server, for both stores: run A finished and was deleted, run B is live (waiting for a
signal), and a blob of an unknown run was written moments ago. After collection A's blobs are
gone, B's (including content A shared with it, in the filesystem store) and the recent blob stay,
and each of B's payloads still decodes. The safety margin is two seconds here (the command's floor
is an hour): the test waits that long, then collects as of the moment it wrote the recent blob.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import StorageDriver, StorageDriverStoreContext, StorageDriverWorkflowInfo
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from cli.arguments import older_than
from cli.blobs import collect
from config.settings import Settings
from runtime.blob_gc import REFERENCE_TYPE, Unreadable, payloads_in, reference_of
from runtime.connection import connect_when_ready
from runtime.converter import blob_root, data_converter, prepare_payload_store, storage_driver
from storage.s3 import S3Client
from storage.subtrees import SubtreeDriver, references_in
from tests.support.processes import DevServer, starter
from tests.support.runs import run_id
from tests.support.s3_support import aws_only_on_loopback, moto_server

MARGIN = timedelta(seconds=2)
SHARED = 60_000  # the activity result both runs store: one blob in the content-addressed store


@activity.defn
async def make_text(size: int) -> str:
    return "shared " * (size // 7)


@workflow.defn(sandboxed=False)
class HoldsBlobs:
    """A big input and a big activity result in history, then a wait: a run in flight."""

    def __init__(self) -> None:
        self.released = False
        self.ready = False

    @workflow.run
    async def run(self, text: str) -> int:
        shared = await workflow.execute_activity(make_text, SHARED, start_to_close_timeout=timedelta(seconds=30))
        self.ready = True
        await workflow.wait_condition(lambda: self.released)
        return len(text) + len(shared)

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.query
    def is_ready(self) -> bool:
        return self.ready


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(params=["filesystem", "s3"])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    values: dict[str, object] = {"DEERFLOW_HOME": str(tmp_path / "home"), "DEERFLOW_PAYLOAD_STORE": request.param}
    refused: list[str] = []
    if request.param == "s3":
        refused = aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID="testing-fake-key",
                                       AWS_SECRET_ACCESS_KEY="testing-fake-secret")
        values |= {"DEERFLOW_S3_ENDPOINT_URL": request.getfixturevalue("s3_url"),
                   "DEERFLOW_S3_BUCKET": f"gc-{run_id('b')}".lower(), "DEERFLOW_S3_KEY_PREFIX": "deerflow/"}
    yield Settings.model_validate(values)
    assert refused == []


# The dev server deletes a closed run only once its transfer queue's ack level passes the delete
# task, and it moves that level every 30 s by default: each deletion took 32-34 s. Moving it every
# second makes it 4 s; what gc does with a deleted run is the same.
FAST_DELETES = ["--dynamic-config-value", 'history.transferProcessorUpdateAckInterval="1s"']


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer(tmp_path_factory.mktemp("temporal") / "temporal.db", FAST_DELETES).start()
    yield server
    server.stop()


@pytest.fixture
async def store_client(dev_server: DevServer, store_settings: Settings) -> AsyncIterator[Client]:
    await prepare_payload_store(store_settings)
    yield await connect_when_ready(dev_server.address, data_converter=data_converter(store_settings))


async def stored_names(settings: Settings) -> set[str]:
    """Every blob in the store: file names, or object keys."""
    if settings.payload_store == "filesystem":
        return {path.name for path in blob_root(settings).rglob("*") if path.is_file()}
    client = S3Client(settings)
    async with client.open() as raw:
        listed = await raw.list_objects_v2(Bucket=settings.s3_bucket)
    return {item["Key"] for item in listed.get("Contents", [])}


def blob_name(settings: Settings, claim: dict[str, str]) -> str:
    return claim["hash_value"] if settings.payload_store == "filesystem" else settings.s3_key_prefix + claim["key"]


async def referenced(handle: WorkflowHandle, settings: Settings) -> set[str]:
    """The blobs a history names: whole payloads, and the subtrees inside payloads (storage/subtrees.py)."""
    history = await handle.fetch_history()
    payloads = [payload for event in history.events for payload in payloads_in(event)]
    driver = storage_driver(settings)
    assert isinstance(driver, SubtreeDriver)
    claims = [dict(reference.claim_data) for reference in map(reference_of, payloads) if reference is not None]
    claims += [dict(driver.claim_for(digest).claim_data) for payload in payloads for digest in references_in(payload)]
    return {blob_name(settings, claim) for claim in claims}


async def delete_run(client: Client, handle: WorkflowHandle) -> None:
    """``temporal workflow delete``, then wait until the server no longer knows the run (about 4 s here)."""
    await client.workflow_service.delete_workflow_execution(DeleteWorkflowExecutionRequest(
        namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=handle.run_id)))
    for _ in range(600):
        try:
            await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return
            raise
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} was not deleted")


async def store_unknown_blob(settings: Settings) -> str:
    """A payload stored for a run the server never heard of (a client that never started it, say)."""
    driver = storage_driver(settings)
    assert isinstance(driver, StorageDriver)
    target = StorageDriverWorkflowInfo(namespace="default", id=run_id("never-started"), type="HoldsBlobs")
    [claim] = await driver.store(StorageDriverStoreContext(target=target),
                                 [Payload(metadata={"encoding": b"binary/plain"}, data=b"u" * 50_000)])
    return blob_name(settings, dict(claim.claim_data))


async def test_gc_deletes_only_the_blobs_of_runs_gone(store_client: Client, store_settings: Settings) -> None:
    client, settings = store_client, store_settings
    task_queue = run_id("gc")
    async with Worker(client, task_queue=task_queue, workflows=[HoldsBlobs], activities=[make_text]):
        gone = await client.start_workflow(HoldsBlobs.run, "a" * 50_000, id=run_id("gone"), task_queue=task_queue)
        live = await client.start_workflow(HoldsBlobs.run, "b" * 50_000, id=run_id("live"), task_queue=task_queue)
        await gone.signal(HoldsBlobs.release)
        await gone.result()
        while not await live.query(HoldsBlobs.is_ready):
            await asyncio.sleep(0.1)
        gone_blobs, live_blobs = await referenced(gone, settings), await referenced(live, settings)
        assert len(gone_blobs) >= 2 and len(live_blobs) >= 2  # input and activity result each
        await delete_run(client, gone)
        await asyncio.sleep(MARGIN.total_seconds() + 1.1)  # S3 keeps whole seconds
        now = datetime.now(UTC)  # the collections below run "now", however long they take
        recent = await store_unknown_blob(settings)
        assert gone_blobs | live_blobs | {recent} <= await stored_names(settings)

        dry = await collect(client, settings, min_age=MARGIN, dry_run=True, now=now)
        assert gone_blobs | live_blobs | {recent} <= await stored_names(settings)
        report = await collect(client, settings, min_age=MARGIN, dry_run=False, now=now)
        assert report.deleted == dry.deleted and report.deleted

        left = await stored_names(settings)
        assert live_blobs | {recent} <= left, "a live run's or a recent blob was deleted"
        assert not (gone_blobs - live_blobs) & left, "the deleted run's own blobs are still there"
        if settings.payload_store == "filesystem":
            assert gone_blobs & live_blobs, "the runs share the activity result's blob"
        assert report.kept_recent >= 1 and report.kept_retained >= len(live_blobs)
        # The live run still reads every payload of its history, and finishes.
        await live.signal(HoldsBlobs.release)
        assert await live.result() == 50_000 + len(await make_text(SHARED))


async def test_a_reused_filesystem_blob_counts_as_young_again(tmp_path: Path) -> None:
    """Storing bytes the store already holds refreshes the blob's age, so gc sees it as in use."""
    settings = Settings.model_validate({"DEERFLOW_HOME": str(tmp_path)})
    driver = storage_driver(settings)
    assert driver is not None
    payload = Payload(metadata={"encoding": b"binary/plain"}, data=b"r" * 40_000)
    [claim] = await driver.store(StorageDriverStoreContext(), [payload])
    path = blob_root(settings) / claim.claim_data["hash_value"][:2] / claim.claim_data["hash_value"]
    os.utime(path, (0, 0))  # 1970: long past any margin
    await driver.store(StorageDriverStoreContext(), [payload])  # a new run stores the same bytes
    assert path.stat().st_mtime > 1e9


def test_the_command_refuses_a_margin_under_an_hour() -> None:
    assert older_than("7") == timedelta(days=7)
    for text in ("0.01", "0", "-1", "soon"):
        with pytest.raises(Exception, match=r"margin|number of days"):
            older_than(text)


def test_a_reference_gc_cannot_read_is_unreadable_not_a_traceback() -> None:
    """A codec-encoded reference could name any blob, and one that is not JSON names none: either is
    ``Unreadable`` (skipped or fatal by who wrote it), never a protobuf ParseError."""
    encoded = Payload(metadata={"encoding": b"binary/encrypted", "__temporal_external_storage_reference": b"true"},
                      data=b"ciphertext")
    with pytest.raises(Unreadable, match="codec-encoded"):
        reference_of(encoded)
    not_json = Payload(metadata={"encoding": b"json/protobuf", "messageType": REFERENCE_TYPE}, data=b"{not json")
    with pytest.raises(Unreadable, match="does not parse"):
        reference_of(not_json)
    assert reference_of(Payload(metadata={"encoding": b"json/plain"}, data=b'"text"')) is None


def test_the_command_on_the_filesystem_store(dev_server: DevServer, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`starter.py blobs gc` as an operator runs it: a dry run lists, the real run deletes, both say so."""
    monkeypatch.setenv("DEERFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("DEERFLOW_PAYLOAD_STORE", "filesystem")
    old, young = "0" * 64, "f" * 64  # no run names either
    for digest in (old, young):
        (tmp_path / "blobs" / digest[:2]).mkdir(parents=True)
        (tmp_path / "blobs" / digest[:2] / digest).write_bytes(b"orphan")
    os.utime(tmp_path / "blobs" / "00" / old, (0, 0))
    dry = starter(dev_server, "blobs", "gc", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert old in dry.stdout and young not in dry.stdout and "Would delete 1 blob(s)" in dry.stdout
    assert (tmp_path / "blobs" / "00" / old).exists()
    done = starter(dev_server, "blobs", "gc", "--older-than", "1")
    assert done.returncode == 0, done.stderr
    assert "Deleted 1 blob(s)" in done.stdout and "1 younger than the margin" in done.stdout
    assert not (tmp_path / "blobs" / "00" / old).exists() and (tmp_path / "blobs" / "ff" / young).exists()
