"""Large payloads go to a blob store and history keeps only references (storage/).

Unit tests of the filesystem driver, then workflow-level proof on a
time-skipping server: a throwaway workflow moving a 1 MB string, the real DeepResearchWorkflow,
and the S3 driver against a loopback moto server. Nothing here leaves 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from config.settings import Settings
from hosting.registry import build_workers, running
from runtime.blob_gc import payloads_in
from runtime.converter import data_converter, prepare_payload_store, storage_driver
from runtime.encryption import KeylessGuard
from storage.filesystem import FileSystemStorageDriver, PayloadStoreError
from storage.s3 import S3Client, ensure_bucket, s3_driver
from storage.subtrees import SUBTREE_KEY_PREFIX, references_in
from tests.support.processes import TEST_SERVER, free_port
from tests.support.runs import QUESTION, run_id
from tests.support.s3_support import aws_only_on_loopback, moto_server
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.undecodable import PayloadConverter
from workflows.research.workflow import DeepResearchWorkflow

THRESHOLD = 32_768
BIG = 1_000_000
REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()


# ---------------------------------------------------------------------------- history inspection


def history_payloads(history: WorkflowHistory) -> list[Payload]:
    return [payload for event in history.events for payload in payloads_in(event)]


def history_bytes(history: WorkflowHistory) -> int:
    return sum(event.ByteSize() for event in history.events)


def references(history: WorkflowHistory) -> list[dict]:
    """The decoded external-storage references in history (driver name and claim)."""
    return [
        json.loads(payload.data)
        for payload in history_payloads(history)
        if payload.metadata.get("messageType") == REFERENCE_TYPE
    ]


def subtree_digests(history: WorkflowHistory) -> list[str]:
    """The subtree blobs history payloads reference (storage/subtrees.py), once per payload."""
    return [digest for payload in history_payloads(history) for digest in sorted(references_in(payload))]


def stored_digests(history: WorkflowHistory) -> list[str]:
    """Every blob history names: whole payloads and subtrees."""
    return [ref["claimData"]["hash_value"] for ref in references(history)] + subtree_digests(history)


def settings_for(**values: object) -> Settings:
    """Settings built here, not from the environment: the tests must not pick up real credentials."""
    return Settings.model_validate(values)


def client_with(client: Client, converter: DataConverter) -> Client:
    """The same (time-skipping) connection with another data converter."""
    return Client(**{**client.config(), "data_converter": converter})


# ----------------------------------------------------------------------- filesystem driver units


def payload_of(data: bytes) -> Payload:
    return Payload(metadata={"encoding": b"binary/plain"}, data=data)


async def test_filesystem_round_trip_and_layout(tmp_path: Path) -> None:
    driver = FileSystemStorageDriver(tmp_path / "blobs")
    payloads = [payload_of(b"a" * 100), payload_of(b"b" * 50_000)]
    claims = await driver.store(StorageDriverStoreContext(), payloads)
    for payload, claim in zip(payloads, claims, strict=True):
        digest = hashlib.sha256(payload.SerializeToString()).hexdigest()
        assert claim.claim_data["hash_value"] == digest
        assert (tmp_path / "blobs" / digest[:2] / digest).is_file()
    assert await driver.retrieve(StorageDriverRetrieveContext(), claims) == payloads
    assert not list((tmp_path / "blobs").rglob("*.tmp"))


async def test_filesystem_store_is_idempotent(tmp_path: Path) -> None:
    driver = FileSystemStorageDriver(tmp_path)
    payload = payload_of(b"same bytes")
    [first] = await driver.store(StorageDriverStoreContext(), [payload])
    path = driver.path_for(first.claim_data["hash_value"])
    written = path.stat().st_ino
    [second] = await driver.store(StorageDriverStoreContext(), [payload])
    assert second == first
    assert path.stat().st_ino == written  # not rewritten (only its time refreshed, for blobs gc)
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 1


@pytest.mark.parametrize("fsync", [True, False])
async def test_filesystem_fsyncs_each_new_blob_unless_told_not_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  fsync: bool) -> None:
    synced: list[Path] = []  # what each fsync made durable, in order
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(Path(os.readlink(f"/proc/self/fd/{fd}"))))
    driver = FileSystemStorageDriver(tmp_path / "blobs", fsync=fsync)
    claims = await driver.store(StorageDriverStoreContext(), [payload_of(b"new"), payload_of(b"newer")])
    if fsync:
        folders = {path.parent for path in (tmp_path / "blobs").rglob("*") if path.is_file()}
        assert len(folders) == 2 and len(synced) == 4
        assert all(path.is_relative_to(tmp_path) and path.name.endswith(".tmp") for path in synced[:2])  # the data
        assert set(synced[2:]) == folders  # then the renames, in their directories
    else:
        assert synced == []
    assert await driver.retrieve(StorageDriverRetrieveContext(), claims) == [payload_of(b"new"), payload_of(b"newer")]
    assert FileSystemStorageDriver(tmp_path, fsync=Settings().blob_fsync)._fsync, "durable by default"


async def test_filesystem_detects_corruption(tmp_path: Path) -> None:
    driver = FileSystemStorageDriver(tmp_path)
    [claim] = await driver.store(StorageDriverStoreContext(), [payload_of(b"original")])
    driver.path_for(claim.claim_data["hash_value"]).write_bytes(payload_of(b"tampered").SerializeToString())
    with pytest.raises(PayloadStoreError, match="corrupted"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])


async def test_filesystem_missing_blob_names_digest_and_root(tmp_path: Path) -> None:
    writer = FileSystemStorageDriver(tmp_path / "worker-home")
    [claim] = await writer.store(StorageDriverStoreContext(), [payload_of(b"elsewhere")])
    reader = FileSystemStorageDriver(tmp_path / "client-home")
    digest = claim.claim_data["hash_value"]
    with pytest.raises(PayloadStoreError) as raised:
        await reader.retrieve(StorageDriverRetrieveContext(), [claim])
    message = str(raised.value)
    assert digest in message
    assert str((tmp_path / "client-home").resolve()) in message
    assert "must share the same blob store" in message


async def test_filesystem_rejects_a_path_in_the_claim(tmp_path: Path) -> None:
    driver = FileSystemStorageDriver(tmp_path)
    claim = StorageDriverClaim(claim_data={"hash_algorithm": "sha256", "hash_value": "../" * 20 + "etc/passwd"})
    with pytest.raises(ApplicationError, match="Malformed") as raised:
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    assert raised.value.non_retryable


async def test_filesystem_refuses_for_good_a_blob_its_present_store_never_wrote(tmp_path: Path) -> None:
    # With the store in place, an unknown digest can only be a forged reference: retrying cannot help.
    driver = FileSystemStorageDriver(tmp_path)
    await driver.store(StorageDriverStoreContext(), [payload_of(b"something")])
    claim = StorageDriverClaim(claim_data={"hash_algorithm": "sha256", "hash_value": "0" * 64})
    with pytest.raises(ApplicationError, match="never wrote") as raised:
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])
    assert raised.value.non_retryable and raised.value.type == "InvalidPayloadReference"


def test_converter_selection(tmp_path: Path) -> None:
    unstored = data_converter(settings_for(DEERFLOW_PAYLOAD_STORE="none"))
    assert unstored.external_storage is None
    assert isinstance(unstored.payload_codec, KeylessGuard) and unstored.payload_codec.inner is None
    converter = data_converter(settings_for(DEERFLOW_HOME=str(tmp_path)))
    assert converter.external_storage is not None
    assert converter.external_storage.payload_size_threshold == THRESHOLD
    [driver] = converter.external_storage.drivers
    assert isinstance(driver, FileSystemStorageDriver)
    assert driver.root == (tmp_path / "blobs").resolve()
    assert converter.payload_converter_class is PayloadConverter  # pydantic's, reading the worker's markers
    with pytest.raises(ValueError, match="DEERFLOW_PAYLOAD_STORE"):
        data_converter(settings_for(DEERFLOW_PAYLOAD_STORE="floppy"))
    with pytest.raises(ValueError, match="DEERFLOW_S3_BUCKET"):
        storage_driver(settings_for(DEERFLOW_PAYLOAD_STORE="s3", DEERFLOW_S3_BUCKET=""))


# ------------------------------------------------------------------------ a throwaway workflow


@activity.defn
async def make_big(size: int) -> str:
    return "x" * size


@activity.defn
async def measure(text: str) -> int:
    return len(text)


@workflow.defn(sandboxed=False)
class BigPayloadWorkflow:
    """Big workflow input, a 1 MB activity result fed to another activity, and a big result."""

    @workflow.run
    async def run(self, seed: str) -> str:
        big = await workflow.execute_activity(make_big, BIG, start_to_close_timeout=timedelta(seconds=30))
        length = await workflow.execute_activity(measure, big, start_to_close_timeout=timedelta(seconds=30))
        return f"{length}:{seed}{big[:100_000]}"


async def run_big_payload_workflow(client: Client) -> WorkflowHistory:
    task_queue = run_id("big-payload")
    async with Worker(client, task_queue=task_queue, workflows=[BigPayloadWorkflow], activities=[make_big, measure]):
        handle = await client.start_workflow(BigPayloadWorkflow.run, "s" * 100_000, id=run_id("big"),
                                             task_queue=task_queue)
        result = await handle.result()
    assert result == f"{BIG}:{'s' * 100_000}{'x' * 100_000}"
    return await handle.fetch_history()


def assert_small(history: WorkflowHistory, threshold: int = THRESHOLD) -> None:
    largest = max(payload.ByteSize() for payload in history_payloads(history))
    assert largest < threshold, f"an inline payload of {largest} bytes"


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def blob_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deerflow-home")


@pytest.fixture(scope="module")
async def storage_env(blob_home: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server whose client stores payloads under ``blob_home``."""
    converter = data_converter(settings_for(DEERFLOW_HOME=str(blob_home)))
    env = await WorkflowEnvironment.start_time_skipping(data_converter=converter,
                                                        test_server_existing_path=TEST_SERVER)
    yield env
    await env.shutdown()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def s3_settings(s3_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Settings]:
    refused = aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID="testing-fake-key",
                                   AWS_SECRET_ACCESS_KEY="testing-fake-secret")
    yield settings_for(DEERFLOW_PAYLOAD_STORE="s3", DEERFLOW_S3_ENDPOINT_URL=s3_server,
                       DEERFLOW_S3_BUCKET=f"payloads-{run_id('b')}".lower())
    assert refused == []


# ----------------------------------------------------------------------- workflow-level proof


async def test_big_payloads_stay_out_of_history(storage_env: WorkflowEnvironment, blob_home: Path) -> None:
    history = await run_big_payload_workflow(storage_env.client)
    assert_small(history)
    assert {ref["driverName"] for ref in references(history)} <= {"deerflow.filesystem"}
    # Workflow input, make_big's result, measure's input, and the workflow result: each a subtree.
    digests = stored_digests(history)
    assert len(digests) >= 4 and len(set(digests)) < len(digests), "measure's input reuses make_big's result"
    for digest in digests:
        assert (blob_home / "blobs" / digest[:2] / digest).is_file()
    assert history_bytes(history) < 20_000


async def test_without_storage_the_same_run_bloats_history(storage_env: WorkflowEnvironment) -> None:
    """The control: with the plain converter the 1 MB string is in history twice (result, input)."""
    history = await run_big_payload_workflow(client_with(storage_env.client, pydantic_data_converter))
    assert not references(history)
    assert max(payload.ByteSize() for payload in history_payloads(history)) > BIG
    assert history_bytes(history) > 2 * BIG


async def run_deep_research(client: Client, settings: Settings) -> WorkflowHistory:
    async with running(build_workers(client, settings)):
        handle = await client.start_workflow(
            WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
            id=run_id("stored"), task_queue=TASK_QUEUE, result_type=ResearchResult)
        result = await handle.result()
    assert isinstance(result, ResearchResult)
    assert result.report
    return await handle.fetch_history()


async def test_deep_research_history_stays_small(storage_env: WorkflowEnvironment, blob_home: Path,
                                                 worker_settings: Settings) -> None:
    """The real workflow with the default converter: every inline payload under 32 KiB, the large
    parts as subtrees in the store, and the replayer reads them back."""
    history = await run_deep_research(storage_env.client, worker_settings)
    assert_small(history)
    digests = subtree_digests(history)
    assert len(set(digests)) < len(digests), "the agent loop re-sends earlier messages: stored once"
    for digest in digests:
        assert (blob_home / "blobs" / digest[:2] / digest).is_file()
    converter = data_converter(settings_for(DEERFLOW_HOME=str(blob_home)))
    replayed = await Replayer(workflows=[DeepResearchWorkflow], data_converter=converter).replay_workflow(history)
    assert replayed.replay_failure is None


async def test_deep_research_through_the_blob_store(storage_env: WorkflowEnvironment, blob_home: Path,
                                                    worker_settings: Settings) -> None:
    """The offline default run's payloads all fit in 32 KiB, so a 4 KiB threshold forces the real
    workflow's conversations and report through the store, and the replayer must read them back."""
    converter = data_converter(settings_for(DEERFLOW_HOME=str(blob_home), DEERFLOW_PAYLOAD_THRESHOLD_BYTES=4096,
                                            DEERFLOW_SUBTREES=False))
    history = await run_deep_research(client_with(storage_env.client, converter), worker_settings)
    assert_small(history, 4096)
    refs = references(history)
    assert refs
    for ref in refs:
        digest = ref["claimData"]["hash_value"]
        assert (blob_home / "blobs" / digest[:2] / digest).is_file()
    replayed = await Replayer(workflows=[DeepResearchWorkflow], data_converter=converter).replay_workflow(history)
    assert replayed.replay_failure is None


# ------------------------------------------------------------------------------------------ S3


async def test_s3_driver_round_trip(s3_settings: Settings) -> None:
    client = S3Client(s3_settings)
    await ensure_bucket(client)
    await ensure_bucket(client)  # an existing bucket is fine
    driver = s3_driver(s3_settings, client)
    payloads = [payload_of(b"small"), payload_of(bytes(range(256)) * 4_000)]
    claims = await driver.store(StorageDriverStoreContext(), payloads)
    assert {claim.claim_data["bucket"] for claim in claims} == {s3_settings.s3_bucket}
    assert await driver.retrieve(StorageDriverRetrieveContext(), claims) == payloads
    assert await driver.store(StorageDriverStoreContext(), payloads) == claims  # idempotent
    assert not await client.object_exists(bucket=s3_settings.s3_bucket, key="v0/absent")


async def test_an_unreachable_s3_store_is_a_store_error_not_a_bad_payload(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """So the worker retries the task (runtime/message_payloads.py) instead of refusing a signal for good."""
    aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID="testing-fake-key",
                         AWS_SECRET_ACCESS_KEY="testing-fake-secret")
    closed = settings_for(DEERFLOW_PAYLOAD_STORE="s3", DEERFLOW_S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
                          DEERFLOW_S3_BUCKET="payloads")
    driver = s3_driver(closed)
    claim = StorageDriverClaim(claim_data={"bucket": "payloads", "hash_algorithm": "sha256", "hash_value": "0" * 64,
                                           "key": "v0/ns/default/d/sha256/" + "0" * 64})
    with pytest.raises(PayloadStoreError, match="cannot be read right now"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])


async def test_s3_key_prefix_is_below_the_references(s3_settings: Settings) -> None:
    """The prefix scopes the objects; the references keep the SDK's own key."""
    client = S3Client(s3_settings.model_copy(update={"s3_key_prefix": "team-a/deerflow/"}))
    await ensure_bucket(client)
    [claim] = await s3_driver(s3_settings, client).store(StorageDriverStoreContext(), [payload_of(b"prefixed")])
    assert claim.claim_data["key"].startswith("v0/")
    async with client.open() as raw:
        listed = await raw.list_objects_v2(Bucket=s3_settings.s3_bucket)
    assert [item["Key"] for item in listed["Contents"]] == ["team-a/deerflow/" + claim.claim_data["key"]]


async def test_s3_workflow_through_external_storage(storage_env: WorkflowEnvironment, s3_settings: Settings) -> None:
    await prepare_payload_store(s3_settings)
    converter = data_converter(s3_settings)
    history = await run_big_payload_workflow(client_with(storage_env.client, converter))
    assert_small(history)
    reader = S3Client(s3_settings)
    for ref in references(history):
        assert ref["driverName"] == "aws.s3driver"
        assert ref["claimData"]["bucket"] == s3_settings.s3_bucket
        assert await reader.object_exists(bucket=s3_settings.s3_bucket, key=ref["claimData"]["key"])
    digests = subtree_digests(history)
    assert len(stored_digests(history)) >= 4 and digests
    for digest in digests:  # shared by every run, keyed by content alone
        assert await reader.object_exists(bucket=s3_settings.s3_bucket, key=SUBTREE_KEY_PREFIX + digest)


def test_s3_settings_never_point_at_aws(s3_settings: Settings) -> None:
    """Guard for the tests above: the endpoint they use is loopback, the credentials fake."""
    driver = data_converter(s3_settings).external_storage
    assert driver is not None
    assert s3_settings.s3_endpoint_url is not None and s3_settings.s3_endpoint_url.startswith("http://127.0.0.1:")
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing-fake-key"
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"



async def test_s3_driver_refuses_for_good_what_it_could_not_have_written(s3_settings: Settings) -> None:
    client = S3Client(s3_settings)
    await ensure_bucket(client)
    driver = s3_driver(s3_settings, client)
    [claim] = await driver.store(StorageDriverStoreContext(), [payload_of(b"genuine")])
    data = claim.claim_data
    absent = "0" * 64
    forgeries = {
        "another bucket": {**data, "bucket": "someone-elses-bucket"},
        "a key not ending in its digest": {**data, "key": "v0/etc/passwd"},
        "a malformed digest": {**data, "hash_value": "../x"},
        "an object the bucket lacks": {**data, "key": data["key"].replace(data["hash_value"], absent),
                                       "hash_value": absent},
    }
    for what, forged in forgeries.items():
        with pytest.raises(ApplicationError) as raised:
            await driver.retrieve(StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=forged)])
        assert raised.value.non_retryable and raised.value.type == "InvalidPayloadReference", what
    assert await driver.retrieve(StorageDriverRetrieveContext(), [claim]) == [payload_of(b"genuine")]
