"""Content-addressed JSON subtrees (storage/subtrees.py): units on the filesystem store, no server.

The workflow-level proofs (a real run replays, the codec server shows content, blob gc keeps the
blobs live runs reference, S3, forged references in a start input) extend the tests of those
features: test_payload_storage.py, test_codec_server.py, test_blob_gc.py, test_hostile_input.py.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    StorageDriverStoreContext,
    WorkflowSerializationContext,
)
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from runtime.blob_gc import KeysNeeded, _subtrees_of
from runtime.converter import blob_root, data_converter
from runtime.encryption import ENCODING as ENCRYPTED
from runtime.encryption import KeylessGuard, encryption_codec
from storage.filesystem import FileSystemStorageDriver
from storage.subtrees import ENCODING, SubtreeCodec, references_in
from workflows.contracts.chat import ChatMessage, ChatRequest, ToolSpec

SECRET = "Quarterly figures of the Swansea Bay ammonia lagoon"
KEY = base64.b64encode(os.urandom(32)).decode()
TOOLS = [ToolSpec(name=f"tool_{n}", description="Look things up. " * 8, parameters={"type": "object"})
         for n in range(3)]


def settings(home: Path, **extra: object) -> Settings:
    return Settings.model_validate({"DEERFLOW_HOME": str(home), **extra})


def conversation(turns: int) -> ChatRequest:
    """An agent loop's input after ``turns`` tool results: each turn re-sends all earlier ones."""
    messages = [ChatMessage(role="user", content=f"{SECRET}. " + "Research the lagoon. " * 30)]
    for turn in range(turns):
        messages.append(ChatMessage(role="tool", tool_call_id=str(turn), content=f"result {turn}: " + "data " * 300))
    return ChatRequest(prompt="researcher", messages=messages, tools=TOOLS)


def blobs(home: Path) -> list[Path]:
    return [path for path in (home / "blobs").rglob("*") if path.is_file()]


async def encode(converter: DataConverter, value: object) -> Payload:
    [payload] = await converter.encode([value])
    return payload


def forged(data: object) -> Payload:
    """A hand-made marked payload, written compactly as the codec writes them."""
    return Payload(metadata={"encoding": ENCODING}, data=json.dumps(data, separators=(",", ":")).encode())


async def test_round_trip_and_each_subtree_stored_once(tmp_path: Path) -> None:
    converter = data_converter(settings(tmp_path))
    first, later = conversation(1), conversation(4)
    small = await encode(converter, first)
    large = await encode(converter, later)
    assert small.metadata["encoding"] == large.metadata["encoding"] == ENCODING
    assert len(large.data) < 1_000 < len(later.model_dump_json()) // 5
    # The user message, the tools list and the first result are shared; the later turns add one each.
    assert len(references_in(small)) == 3 and len(references_in(large)) == 6
    assert len(blobs(tmp_path)) == 6
    # Another process (no caches) reads them back from the store.
    assert await data_converter(settings(tmp_path)).decode([small, large], [ChatRequest, ChatRequest]) == [first, later]


async def test_known_subtrees_are_not_stored_again_and_decoding_reads_nothing(tmp_path: Path) -> None:
    guard = data_converter(settings(tmp_path)).payload_codec  # no keys: the chain is guarded
    assert isinstance(guard, KeylessGuard)
    codec = guard.inner
    assert isinstance(codec, SubtreeCodec)
    calls: list[str] = []
    driver = codec._driver
    store, retrieve = driver.store, driver.retrieve

    async def counting_store(*args: object) -> object:
        calls.append("store")
        return await store(*args)  # type: ignore[arg-type]

    async def counting_retrieve(*args: object) -> object:
        calls.append("retrieve")
        return await retrieve(*args)  # type: ignore[arg-type]

    driver.store, driver.retrieve = counting_store, counting_retrieve  # type: ignore[method-assign]
    payload = Payload(metadata={"encoding": b"json/plain"}, data=conversation(2).model_dump_json().encode())
    [encoded] = await codec.encode([payload])
    [again] = await codec.encode([payload])
    assert again == encoded and calls == ["store"]
    [decoded] = await codec.decode([encoded])
    assert calls == ["store"] and json.loads(decoded.data) == json.loads(payload.data)


async def test_payloads_that_gain_nothing_stay_as_they_are(tmp_path: Path) -> None:
    converter = data_converter(settings(tmp_path))
    short = await encode(converter, ChatRequest(prompt="planner"))
    lookalike = await encode(converter, {"$subtree": "0" * 64, "text": "x" * 5_000})
    assert short.metadata["encoding"] == lookalike.metadata["encoding"] == b"json/plain"
    assert (await converter.decode([lookalike]))[0]["text"] == "x" * 5_000
    # Still over the whole-payload threshold once shrunk: stored whole, never as a marked blob.
    many = [ChatMessage(role="tool", tool_call_id=str(n), content="r" * 300) for n in range(800)]
    whole = await encode(converter, ChatRequest(prompt="p", messages=many))
    assert whole.metadata["encoding"] == b"json/protobuf"  # the whole-payload store's reference
    assert not any(ENCODING in path.read_bytes() for path in blobs(tmp_path))


def in_activity_context() -> ActivitySerializationContext:
    return ActivitySerializationContext(
        namespace="default", activity_id="1", activity_type="chat", activity_task_queue="q", workflow_id="w",
        workflow_type="DeepResearchWorkflow", is_local=False)


async def test_only_activity_payloads_are_shrunk(tmp_path: Path) -> None:
    # The start input, signals, the status query and the result stay readable by the plain `temporal` CLI.
    converter = data_converter(settings(tmp_path))
    in_workflow = converter.with_context(WorkflowSerializationContext(namespace="default", workflow_id="w"))
    in_activity = converter.with_context(in_activity_context())
    value = conversation(1)
    assert (await encode(in_workflow, value)).metadata["encoding"] == b"json/plain"
    shrunk = await encode(in_activity, value)
    assert shrunk.metadata["encoding"] == ENCODING
    assert await in_workflow.decode([shrunk], [ChatRequest]) == [value]
    # Binding is per payload of every task: an activity's context costs no copy of the converter,
    # and a binding re-bound to an activity's context shrinks again.
    assert in_activity is converter
    rebound = in_workflow.with_context(in_activity_context())
    assert (await encode(rebound, conversation(2))).metadata["encoding"] == ENCODING


async def test_off_without_a_store_and_read_only_when_disabled(tmp_path: Path) -> None:
    unstored = data_converter(settings(tmp_path, DEERFLOW_PAYLOAD_STORE="none")).payload_codec
    assert isinstance(unstored, KeylessGuard) and unstored.inner is None
    shrunk = await encode(data_converter(settings(tmp_path / "writer")), conversation(1))
    reader = data_converter(settings(tmp_path / "writer", DEERFLOW_SUBTREES="false"))
    assert (await encode(reader, conversation(2))).metadata["encoding"] == b"json/plain"
    assert await reader.decode([shrunk], [ChatRequest]) == [conversation(1)]
    with pytest.raises(ValueError, match="greater than or equal to 128"):
        settings(tmp_path, DEERFLOW_SUBTREE_MIN_BYTES=64)


@pytest.mark.parametrize(("data", "problem"), [
    ({"question": {"$subtree": "0" * 64}}, "never wrote"),
    ({"question": {"$subtree": "../../etc/passwd"}}, "Malformed subtree reference"),
    ({"question": {"$subtree": "a" * 64, "more": 1}}, "Malformed subtree reference"),
    ('{"question": {"$subtree": "' + "a" * 64 + '"}}', "Malformed subtree reference"),  # not as written
])
async def test_forged_references_are_refused_for_good(tmp_path: Path, data: object, problem: str) -> None:
    converter = data_converter(settings(tmp_path))
    await encode(converter, conversation(1))  # the store is there, so an unknown blob was never written
    payload = forged(data) if not isinstance(data, str) else Payload(metadata={"encoding": ENCODING},
                                                                      data=data.encode())
    with pytest.raises(ApplicationError, match=problem) as refused:
        await converter.decode([payload])
    assert refused.value.type == "InvalidPayloadReference" and refused.value.non_retryable


@pytest.mark.parametrize(("blob", "problem"), [
    (Payload(metadata={"encoding": b"binary/plain"}, data=b'"bytes that parse as JSON"'), "not a JSON subtree"),
    (Payload(metadata={"encoding": b"json/plain"}, data=b"\x00" * 64), "not a JSON subtree"),
    (Payload(metadata={"encoding": b"json/plain"}, data=b'{"$subtree":"' + b"a" * 64 + b'"}'), "never nest"),
])
async def test_a_reference_to_a_blob_that_is_no_subtree_is_refused(tmp_path: Path, blob: Payload,
                                                                   problem: str) -> None:
    # Blobs of the same store that this codec did not write: a whole binary payload, or a nested reference.
    driver = FileSystemStorageDriver(tmp_path / "blobs")
    [claim] = await driver.store(StorageDriverStoreContext(), [blob])
    with pytest.raises(ApplicationError, match=problem) as refused:
        await data_converter(settings(tmp_path)).decode([forged({"x": {"$subtree": claim.claim_data["hash_value"]}})])
    assert refused.value.type == "InvalidPayloadReference" and refused.value.non_retryable


async def test_encrypted_subtrees_are_ciphertext_and_still_deduplicated(tmp_path: Path) -> None:
    encrypted = settings(tmp_path, DEERFLOW_ENCRYPTION_KEYS=f"k1:{KEY}")
    value = conversation(2)
    first = await encode(data_converter(encrypted), value)
    count = len(blobs(tmp_path))
    second = await encode(data_converter(encrypted), value)  # another process: no caches
    assert first.metadata["encoding"] == second.metadata["encoding"] == ENCRYPTED
    assert len(blobs(tmp_path)) == count == 4, "equal subtrees seal alike, so they stay one blob"
    for path in blobs(tmp_path):
        data = path.read_bytes()
        assert ENCRYPTED in data and SECRET.encode() not in data and b"data data" not in data
    assert SECRET.encode() not in first.SerializeToString()
    assert await data_converter(encrypted).decode([first], [ChatRequest]) == [value]


async def test_gc_reads_subtree_references_through_encryption(tmp_path: Path) -> None:
    encrypted = settings(tmp_path, DEERFLOW_ENCRYPTION_KEYS=f"k1:{KEY}")
    payload = await encode(data_converter(encrypted), conversation(1))
    assert {path.name for path in blobs(tmp_path)} == await _subtrees_of(payload, encryption_codec(encrypted))
    with pytest.raises(KeysNeeded, match="no keys"):
        await _subtrees_of(payload, None)
    assert await _subtrees_of(forged({"q": {"$subtree": "../x"}}), None) == set()  # names no blob
    assert blob_root(encrypted) == tmp_path / "blobs"
