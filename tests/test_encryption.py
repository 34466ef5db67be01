"""The encryption codec: round trip, key rotation, refused payloads and keys, ciphertext in blobs."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from runtime.converter import blob_root, data_converter
from runtime.encryption import (
    ENCODING,
    KEY_ID_KEY,
    EncryptionCodec,
    EncryptionConfigError,
    configured_keys,
    encryption_codec,
    parse_keys,
)
from workflows.contracts.research import ResearchRequest

SECRET_TEXT = "Quantum-dot ceramic separators 42 outlast every cathode"


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def payload(text: str = SECRET_TEXT) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{text}"'.encode())


async def test_round_trip_hides_the_payload_and_uses_a_fresh_nonce() -> None:
    codec = EncryptionCodec(parse_keys(f"k1:{new_key()}", "test"))
    first, second = await codec.encode([payload(), payload()])
    assert first.metadata["encoding"] == ENCODING and first.metadata[KEY_ID_KEY] == b"k1"
    assert SECRET_TEXT.encode() not in first.SerializeToString()
    assert first.data[:12] != second.data[:12] and first.data != second.data
    assert await codec.decode([first, second]) == [payload(), payload()]


async def test_a_payload_written_with_an_old_key_decodes_after_rotation() -> None:
    old, new = new_key(), new_key()
    [written] = await EncryptionCodec(parse_keys(f"old:{old}", "test")).encode([payload()])
    rotated = EncryptionCodec(parse_keys(f"new:{new},old:{old}", "test"))
    assert rotated.active_key_id == "new"
    assert await rotated.decode([written]) == [payload()]
    [rewritten] = await rotated.encode([payload()])
    assert rewritten.metadata[KEY_ID_KEY] == b"new"


async def test_an_unknown_key_id_is_a_clear_non_retryable_error() -> None:
    [written] = await EncryptionCodec(parse_keys(f"gone:{new_key()}", "test")).encode([payload()])
    with pytest.raises(ApplicationError, match=r"key id .gone.*not among the configured keys \(k2\)") as error:
        await EncryptionCodec(parse_keys(f"k2:{new_key()}", "test")).decode([written])
    assert error.value.non_retryable and error.value.type == "PayloadDecryptionError"


@pytest.mark.parametrize("tamper", ["flip a ciphertext bit", "relabel the key id", "truncate"])
async def test_tampering_is_detected(tamper: str) -> None:
    keys = parse_keys(f"a:{new_key()},b:{new_key()}", "test")
    codec = EncryptionCodec(keys)
    [written] = await codec.encode([payload()])
    if tamper == "flip a ciphertext bit":
        written.data = written.data[:20] + bytes([written.data[20] ^ 1]) + written.data[21:]
    elif tamper == "relabel the key id":
        written.metadata[KEY_ID_KEY] = b"b"
    else:
        written.data = written.data[:10]
    with pytest.raises(ApplicationError, match="failed authentication") as error:
        await codec.decode([written])
    assert error.value.non_retryable


async def test_plain_payloads_pass_through_decoding() -> None:
    codec = EncryptionCodec(parse_keys(f"k:{new_key()}", "test"))
    assert await codec.decode([payload()]) == [payload()]


@pytest.mark.parametrize(("text", "problem"), [
    ("k1:" + base64.b64encode(bytes(range(16))).decode(), "is 16 bytes; AES-256 needs 32"),
    ("k1:not*base64!", "not valid base64"),
    ("just-a-key-without-id", "each entry must be id:base64key"),
    ("bad id:" + base64.b64encode(bytes(range(32))).decode(), "each entry must be id:base64key"),
    ("k1:{k},k1:{k}", "listed twice"),
])
def test_malformed_keys_are_refused_clearly(text: str, problem: str) -> None:
    text = text.replace("{k}", new_key())
    with pytest.raises(EncryptionConfigError, match=problem) as error:
        parse_keys(text, "DEERFLOW_ENCRYPTION_KEYS")
    assert str(error.value).startswith("DEERFLOW_ENCRYPTION_KEYS: ")
    secret = text.partition(":")[2]
    assert not secret or secret not in str(error.value)  # key material never enters a message


def test_keys_from_a_file_with_comments_and_off_by_default(tmp_path: Path) -> None:
    assert encryption_codec(Settings()) is None
    first, second = new_key(), new_key()
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-11\nnew:{first}\nold:{second}  # kept for old runs\n")
    keys = configured_keys(Settings(DEERFLOW_ENCRYPTION_KEY_FILE=path))
    assert list(keys) == ["new", "old"] and keys["new"] == base64.b64decode(first)
    with pytest.raises(EncryptionConfigError, match="not both"):
        configured_keys(Settings(DEERFLOW_ENCRYPTION_KEY_FILE=path, DEERFLOW_ENCRYPTION_KEYS=f"x:{first}"))
    with pytest.raises(EncryptionConfigError, match="cannot read"):
        configured_keys(Settings(DEERFLOW_ENCRYPTION_KEY_FILE=tmp_path / "missing"))


@pytest.mark.parametrize("subtrees", [False, True])
async def test_history_payloads_and_blobs_are_ciphertext(tmp_path: Path, subtrees: bool) -> None:
    settings = Settings(DEERFLOW_HOME=tmp_path, DEERFLOW_PAYLOAD_THRESHOLD_BYTES=1024,
                        DEERFLOW_ENCRYPTION_KEYS=f"k1:{new_key()}", DEERFLOW_SUBTREES=subtrees)
    converter = data_converter(settings)
    small = ResearchRequest(question=SECRET_TEXT)
    large = ResearchRequest(question=SECRET_TEXT + " " + "x" * 4000)
    inline, reference = await converter.encode([small, large])
    assert inline.metadata["encoding"] == ENCODING and SECRET_TEXT.encode() not in inline.SerializeToString()
    # The blob store's whole-payload reference, or the payload shrunk to a subtree reference and encrypted.
    assert reference.metadata["encoding"] == (ENCODING if subtrees else b"json/protobuf")
    assert SECRET_TEXT.encode() not in reference.SerializeToString()
    blobs = [path.read_bytes() for path in blob_root(settings).rglob("*") if path.is_file()]
    assert len(blobs) == 1 and ENCODING in blobs[0] and SECRET_TEXT.encode() not in blobs[0]
    assert await converter.decode([inline, reference], [ResearchRequest, ResearchRequest]) == [small, large]


async def test_failure_messages_are_encrypted_too(tmp_path: Path) -> None:
    converter = data_converter(Settings(DEERFLOW_HOME=tmp_path, DEERFLOW_ENCRYPTION_KEYS=f"k1:{new_key()}"))
    failure = Failure()
    await converter.encode_failure(ApplicationError(f"Invalid request: question: {SECRET_TEXT}"), failure)
    assert failure.message == "Encoded failure" and SECRET_TEXT.encode() not in failure.SerializeToString()
    decoded = await converter.decode_failure(failure)
    assert str(decoded) == f"Invalid request: question: {SECRET_TEXT}"
