"""The codec server's protocol: decode/encode, CORS for the UI, the token, Host and size doors.

In process over ASGI (fast); tests/test_codec_e2e.py drives it from the Web UI and the CLI.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from google.protobuf.json_format import MessageToDict
from temporalio.api.common.v1 import Payload

import starter
from config.settings import Settings
from runtime.converter import data_converter
from runtime.encryption import ENCODING
from server.codec import create_codec_app
from server.security import MAX_JSON_DEPTH
from tests.support.processes import REPO_DIR
from workflows.contracts.research import ResearchRequest

KEY = base64.b64encode(os.urandom(32)).decode()
BASE = "http://127.0.0.1:8081"
UI = "http://127.0.0.1:8233"
QUESTION = "Which tidal lagoons in Swansea Bay store ammonia?"


def settings_for(home: Path, **extra: object) -> Settings:
    return Settings(DEERFLOW_HOME=home, DEERFLOW_PAYLOAD_THRESHOLD_BYTES=1024, DEERFLOW_ENCRYPTION_KEYS=f"k1:{KEY}",
                    DEERFLOW_CODEC_MAX_BODY_BYTES=64 * 1024, **extra)


@pytest.fixture
async def codec(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_for(tmp_path)
    app = create_codec_app(data_converter(settings), settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client


async def stored_payloads(home: Path, *, subtrees: bool = False) -> list[dict]:
    """A small and a large request as the worker writes them (encrypted), in protobuf JSON: the large
    one a whole-payload blob reference, or (``subtrees``) a payload whose question is a subtree reference."""
    converter = data_converter(settings_for(home, DEERFLOW_SUBTREES=subtrees))
    payloads = await converter.encode([ResearchRequest(question=QUESTION),
                                       ResearchRequest(question=QUESTION + " " + "y" * 3000)])
    expected = b"binary/encrypted" if subtrees else b"json/protobuf"  # subtree-shrunk, or a blob reference
    assert payloads[1].metadata["encoding"] == expected and len(payloads[1].data) < 1024
    return [MessageToDict(payload) for payload in payloads]


def texts(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [base64.b64decode(item["data"]).decode() for item in response.json()["payloads"]]


@pytest.mark.parametrize("subtrees", [False, True])
async def test_decode_resolves_blob_references_and_decrypts(codec: httpx.AsyncClient, tmp_path: Path,
                                                            subtrees: bool) -> None:
    # The Web UI shows content: a subtree reference is expanded like a whole-payload one.
    response = await codec.post("/decode", json={"payloads": await stored_payloads(tmp_path, subtrees=subtrees)})
    small, large = texts(response)
    assert json.loads(small)["question"] == QUESTION
    assert json.loads(large)["question"] == QUESTION + " " + "y" * 3000
    assert {item["metadata"]["encoding"] for item in response.json()["payloads"]} == {
        base64.b64encode(b"json/plain").decode()}


async def test_encode_encrypts_and_decode_reads_it_back(codec: httpx.AsyncClient) -> None:
    plain = MessageToDict(Payload(metadata={"encoding": b"json/plain"}, data=b'"[ACCEPTED]"'))
    encoded = await codec.post("/encode", json={"payloads": [plain]})
    assert encoded.status_code == 200
    [item] = encoded.json()["payloads"]
    assert base64.b64decode(item["metadata"]["encoding"]) == ENCODING
    assert b"ACCEPTED" not in base64.b64decode(item["data"])
    assert texts(await codec.post("/decode", json={"payloads": [item]})) == ['"[ACCEPTED]"']


async def test_encode_never_writes_to_the_store(codec: httpx.AsyncClient, tmp_path: Path) -> None:
    edit = json.dumps("[EDIT_PLAN] " + "add a step on costs " * 200).encode()
    encoded = await codec.post("/encode", json={"payloads": [MessageToDict(
        Payload(metadata={"encoding": b"json/plain"}, data=edit))]})
    assert encoded.status_code == 200
    assert not (tmp_path / "blobs").exists() or not any((tmp_path / "blobs").iterdir())
    assert texts(await codec.post("/decode", json={"payloads": encoded.json()["payloads"]})) == [edit.decode()]


async def test_bad_payloads_get_a_clear_error(codec: httpx.AsyncClient, tmp_path: Path) -> None:
    [small, _] = await stored_payloads(tmp_path)
    data = bytearray(base64.b64decode(small["data"]))
    data[-1] ^= 1
    tampered = {**small, "data": base64.b64encode(bytes(data)).decode()}
    response = await codec.post("/decode", json={"payloads": [tampered]})
    assert response.status_code == 400 and "failed authentication" in response.json()["detail"]
    reference_type = b"temporal.api.sdk.v1.ExternalStorageReference"
    forged = {"metadata": {"encoding": base64.b64encode(b"json/protobuf").decode(),
                           "messageType": base64.b64encode(reference_type).decode()},
              "data": base64.b64encode(json.dumps({"driverName": "deerflow.filesystem", "claimData": {
                  "hash_algorithm": "sha256", "hash_value": "../../etc/passwd"}}).encode()).decode()}
    response = await codec.post("/decode", json={"payloads": [forged]})
    assert response.status_code == 400 and "Malformed payload claim" in response.json()["detail"]
    for body in ({"payload": []}, {"payloads": [1]}, {"payloads": [{"metadata": 5}]}):
        response = await codec.post("/decode", json=body)
        assert response.status_code == 400, body


@pytest.mark.parametrize("depth", [30_000, MAX_JSON_DEPTH + 1])  # past the parser's recursion limit; past ours
async def test_json_nested_too_deep_is_refused(codec: httpx.AsyncClient, depth: int) -> None:
    response = await codec.post("/decode", content=b"[" * depth + b"]" * depth,
                                headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "nested deeper" in response.json()["detail"], response.text


async def test_cors_preflight_and_answers_for_the_ui_origin(codec: httpx.AsyncClient) -> None:
    preflight = await codec.options("/decode", headers={
        "Origin": UI, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace,authorization"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == UI
    allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "x-namespace", "authorization"} <= allowed
    answer = await codec.post("/decode", json={"payloads": []}, headers={"Origin": UI, "X-Namespace": "default"})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == UI


async def test_other_origins_are_refused(codec: httpx.AsyncClient) -> None:
    evil = "http://evil.example"
    preflight = await codec.options("/decode", headers={"Origin": evil, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    refused = await codec.post("/decode", json={"payloads": []}, headers={"Origin": evil})
    assert refused.status_code == 403 and "DEERFLOW_CODEC_ALLOWED_ORIGINS" in refused.json()["detail"]
    rebound = await codec.post("/decode", json={"payloads": []}, headers={"Host": "evil.example:8081"})
    assert rebound.status_code == 403  # DNS rebinding: a name that is not loopback, without a token


async def test_the_token_is_required_when_set(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, DEERFLOW_CODEC_TOKEN="codec-s3cret-token")
    app = create_codec_app(data_converter(settings), settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://codec.internal") as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "codec-s3cret-token"}):
            refused = await client.post("/decode", json={"payloads": []}, headers=headers)
            assert refused.status_code == 401 and "DEERFLOW_CODEC_TOKEN" in refused.json()["detail"]
        accepted = await client.post("/decode", json={"payloads": []},
                                     headers={"Authorization": "Bearer codec-s3cret-token"})
        assert accepted.status_code == 200 and accepted.json() == {"payloads": []}


async def test_bodies_over_the_limit_are_refused(codec: httpx.AsyncClient) -> None:
    big = {"payloads": [{"data": base64.b64encode(b"z" * 70_000).decode()}]}
    response = await codec.post("/decode", json=big)
    assert response.status_code == 413 and "over 65536 bytes" in response.json()["detail"]


def test_listening_beyond_loopback_needs_the_token(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DEERFLOW_CODEC_TOKEN", raising=False)
    assert starter.main(["codec-server", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "Listening on 0.0.0.0 needs DEERFLOW_CODEC_TOKEN" in capsys.readouterr().err


def test_a_malformed_key_stops_each_process_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    short = base64.b64encode(os.urandom(16)).decode()
    monkeypatch.setenv("DEERFLOW_ENCRYPTION_KEYS", f"k1:{short}")
    assert starter.main(["codec-server", "--port", "1"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("Error: DEERFLOW_ENCRYPTION_KEYS: key 'k1' is 16 bytes; AES-256 needs 32")
    assert short not in error
    worker = subprocess.run([sys.executable, str(REPO_DIR / "worker.py")], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"}, cwd=REPO_DIR, check=False)
    assert worker.returncode == 2, worker.stderr
    assert "key 'k1' is 16 bytes" in worker.stderr and "Traceback" not in worker.stderr
