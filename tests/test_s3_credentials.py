"""The S3 store takes its credentials from the standard AWS chain, checked by a moto that enforces IAM.

moto on loopback, with IAM authentication switched on once a user (long-term keys) and a role
(temporary keys with a session token) exist: a request with a wrong key, a wrong secret or a
missing session token is refused as AWS would refuse it. Large payloads go through the real data
converter. Nothing here leaves 127.0.0.1 (tests/support/s3_support.py), and nothing tries the EC2
instance metadata address.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import boto3
import httpx
import pytest
from temporalio.client import Client

from config.settings import Settings
from runtime.blob_gc import BlobGcError, collect_s3
from runtime.converter import data_converter, prepare_payload_store
from storage.s3 import S3Client
from tests.support.runs import run_id
from tests.support.s3_support import aws_only_on_loopback, moto_server

ALLOW_S3 = json.dumps({"Version": "2012-10-17",
                       "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})
TRUST = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "sts:AssumeRole"}]})
BIG_TEXT = "a long researcher conversation " * 5_000  # ~150 KB: well over the 32 KiB threshold


@dataclass(frozen=True)
class Iam:
    url: str
    access_key_id: str
    secret_access_key: str
    session_access_key_id: str
    session_secret_access_key: str
    session_token: str


@pytest.fixture(scope="module")
def iam() -> Iterator[Iam]:
    """A moto with one IAM user and one assumed role, enforcing IAM authentication from then on."""
    with moto_server() as url:
        setup = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        iam_client = boto3.client("iam", **setup)
        iam_client.create_user(UserName="deerflow-worker")
        iam_client.put_user_policy(UserName="deerflow-worker", PolicyName="s3", PolicyDocument=ALLOW_S3)
        key = iam_client.create_access_key(UserName="deerflow-worker")["AccessKey"]
        role = iam_client.create_role(RoleName="deerflow-role", AssumeRolePolicyDocument=TRUST)["Role"]
        iam_client.put_role_policy(RoleName="deerflow-role", PolicyName="s3", PolicyDocument=ALLOW_S3)
        session = boto3.client("sts", **setup).assume_role(RoleArn=role["Arn"], RoleSessionName="worker")
        temporary = session["Credentials"]
        httpx.post(f"{url}/moto-api/reset-auth", content=b"0").raise_for_status()
        try:
            yield Iam(url, key["AccessKeyId"], key["SecretAccessKey"], temporary["AccessKeyId"],
                      temporary["SecretAccessKey"], temporary["SessionToken"])
        finally:
            httpx.post(f"{url}/moto-api/reset-auth", content=b"inf").raise_for_status()


def s3_settings(iam: Iam, **values: object) -> Settings:
    return Settings.model_validate({"DEERFLOW_PAYLOAD_STORE": "s3", "DEERFLOW_S3_ENDPOINT_URL": iam.url,
                                    "DEERFLOW_S3_BUCKET": f"creds-{run_id('b')}".lower(), **values})


async def round_trip(settings: Settings) -> None:
    """The worker's start-up (bucket ensured), then a large value through the converter and back."""
    await prepare_payload_store(settings)
    converter = data_converter(settings)
    [stored] = await converter.encode([BIG_TEXT])
    assert stored.ByteSize() < 2_000 and BIG_TEXT[:40].encode() not in stored.SerializeToString()
    assert await converter.decode([stored], [str]) == [BIG_TEXT]


async def test_session_token_from_the_environment(iam: Iam, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    refused = aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID=iam.session_access_key_id,
                                   AWS_SECRET_ACCESS_KEY=iam.session_secret_access_key,
                                   AWS_SESSION_TOKEN=iam.session_token)
    await round_trip(s3_settings(iam))
    # The token is checked: the same temporary keys without it are refused.
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    with pytest.raises(RuntimeError, match=r"refused the AWS credentials \(403\)"):
        await prepare_payload_store(s3_settings(iam))
    assert refused == []


def write_profile(tmp_path: Path, access_key_id: str, secret_access_key: str) -> dict[str, str]:
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[deerflow]\naws_access_key_id = {access_key_id}\n"
                           f"aws_secret_access_key = {secret_access_key}\n")
    config = tmp_path / "config"
    config.write_text("[profile deerflow]\nregion = eu-west-2\n")
    return {"AWS_PROFILE": "deerflow", "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
            "AWS_CONFIG_FILE": str(config)}


async def test_profile_from_the_shared_files(iam: Iam, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    refused = aws_only_on_loopback(monkeypatch, tmp_path,
                                   **write_profile(tmp_path, iam.access_key_id, iam.secret_access_key))
    settings = s3_settings(iam)
    await round_trip(settings)
    # The profile's region was used: the bucket was created in it.
    client = S3Client(settings)
    async with client.open() as raw:
        location = await raw.get_bucket_location(Bucket=settings.s3_bucket)
    assert location["LocationConstraint"] == "eu-west-2"
    assert refused == []


async def test_a_wrong_secret_is_one_clear_line_without_the_secret(iam: Iam, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    refused = aws_only_on_loopback(monkeypatch, tmp_path,
                                   **write_profile(tmp_path, iam.access_key_id, "not-the-secret-at-all"))
    with pytest.raises(RuntimeError) as raised:
        await prepare_payload_store(s3_settings(iam))
    message = str(raised.value)
    # HeadBucket's 403 has no body, so no error code beyond the status.
    assert "refused the AWS credentials (403)" in message and "AWS_PROFILE" in message
    assert "\n" not in message and "not-the-secret-at-all" not in message
    assert refused == []


async def test_no_credentials_at_all_is_clear_and_never_asks_the_metadata_address(
        iam: Iam, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    refused = aws_only_on_loopback(monkeypatch, tmp_path)
    with pytest.raises(RuntimeError, match="No AWS credentials for the S3 payload store"):
        await prepare_payload_store(s3_settings(iam))
    assert refused == []


async def test_a_missing_bucket_on_aws_itself_is_an_error_not_created(iam: Iam, monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """No DEERFLOW_S3_ENDPOINT_URL means AWS: here botocore's own AWS_ENDPOINT_URL_S3 sends it to moto."""
    refused = aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID=iam.access_key_id,
                                   AWS_SECRET_ACCESS_KEY=iam.secret_access_key, AWS_ENDPOINT_URL_S3=iam.url)
    settings = s3_settings(iam, DEERFLOW_S3_ENDPOINT_URL=None, DEERFLOW_S3_PATH_STYLE=True)
    with pytest.raises(RuntimeError, match=f"bucket '{settings.s3_bucket}' does not exist: create it"):
        await prepare_payload_store(settings)
    assert refused == []


async def test_blob_gc_with_a_wrong_secret_is_one_clear_line(iam: Iam, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    refused = aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID=iam.access_key_id,
                                   AWS_SECRET_ACCESS_KEY="not-the-secret-at-all")
    no_server = cast(Client, SimpleNamespace(namespace="default"))  # S3 refuses before any run is asked about
    with pytest.raises(BlobGcError) as raised:
        await collect_s3(no_server, S3Client(s3_settings(iam)), min_age=timedelta(days=7), dry_run=False)
    message = str(raised.value)
    assert "refused the AWS credentials (SignatureDoesNotMatch)" in message and "Nothing more was deleted" in message
    assert "not-the-secret-at-all" not in message
    assert refused == []
