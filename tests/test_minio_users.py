"""The storage users docker-compose.yml's minio-setup creates: each service's, with the least it needs (issue #43 §2).

Why: the API server and the codec server once held MinIO's root credentials; a leak of either could delete or
overwrite every blob. test_compose_settings.py reads the policy documents; this checks what they allow, against
an S3 that enforces IAM policies. MinIO's image and ``mc`` cannot be had on this machine, so:
- the shipped minio-setup script runs (``sh -c``, as its container runs it) with a stand-in ``mc`` on PATH
  that records what it would ask MinIO: the bucket, the policy documents, the users and their attachments;
- moto's server on loopback gets that bucket, those users and policies (MinIO's access key is the user's
  name, moto's is one it generates) and enforces IAM from then on;
- then each service's own code with its user's keys: the worker's and the sandbox's start-up check of the
  bucket, the API server storing a large input through its data converter, the codec server's ``/decode``
  reading it; and every S3 call the users must not make is refused.
Not tested against real MinIO: ``mc``'s own behaviour (the stand-in records, it does not check), MinIO's
evaluation of the policies (moto evaluates them as AWS does; MinIO follows AWS's grammar for these actions),
and a missing object's 404 rather than 403, which S3 and MinIO give only with s3:ListBucket (moto gives 404
either way).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import yaml
from botocore.exceptions import ClientError
from google.protobuf.json_format import MessageToDict

from config.settings import Settings
from runtime.converter import data_converter, prepare_payload_store
from server.codec import create_codec_app
from tests.support.s3_support import aws_only_on_loopback, moto_server

ROOT = Path(__file__).resolve().parent.parent
SERVICES = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
# The operator's .env: the passwords minio-setup requires (their users keep the file's defaults).
DOT_ENV = {"MINIO_ROOT_USER": "admin", "MINIO_ROOT_PASSWORD": "admin-password", "DEERFLOW_TOKEN_STREAM_TOKEN": "t" * 16,
           **{f"{name}_S3_PASSWORD": f"{name.lower()}-password" for name in ("WORKER", "API", "CODEC", "SANDBOX")}}
VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?::(?P<op>[-?])(?P<arg>[^}]*))?\}")
# A recording stand-in for MinIO's client: each call's arguments, and the policy document a `policy create` reads.
FAKE_MC = """#!{python}
import json, os, sys
args = sys.argv[1:]
record = {{"args": args}}
if args[:3] == ["admin", "policy", "create"]:
    with open(args[5]) as document:
        record["document"] = json.load(document)
with open(os.environ["MC_RECORD"], "a") as out:
    out.write(json.dumps(record) + "\\n")
"""
BIG_TEXT = "a researcher's long conversation " * 3_000  # ~100 KB: a blob, not inline
OTHER_BUCKET = "someone-elses-bucket"
SERVICE_USERS = ("worker", "api", "codec", "sandbox")  # each with a MinIO user of its own


def interpolated(value: str) -> str:
    """A compose value with the operator's .env applied (``${NAME:-default}``, ``${NAME:?message}``)."""
    def one(match: re.Match[str]) -> str:
        if match["name"] in DOT_ENV:
            return DOT_ENV[match["name"]]
        assert match["op"] == "-", f"{match['name']} is required and not in the test's .env"
        return match["arg"]
    return VARIABLE.sub(one, value)


def environment(service: str) -> dict[str, str]:
    return {name: interpolated(str(value)) for name, value in SERVICES[service]["environment"].items()}


def run_minio_setup(tmp_path: Path) -> list[dict[str, Any]]:
    """minio-setup's command as its container runs it (compose's ``$$`` is a ``$``), with the stand-in mc."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mc = bin_dir / "mc"
    mc.write_text(FAKE_MC.format(python=sys.executable))
    mc.chmod(0o755)
    record = tmp_path / "mc.jsonl"
    setup = SERVICES["minio-setup"]
    assert setup["entrypoint"] == ["/bin/sh", "-c"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MC_RECORD": str(record), **environment("minio-setup")}
    script = setup["command"][0].replace("$$", "$")
    assert not re.findall(r"> *(?!/tmp/)\S+", script)  # it writes its policy documents under /tmp only: here, ours
    subprocess.run(["/bin/sh", "-c", script.replace("/tmp/", f"{tmp_path}/")], env=env, check=True, timeout=60)
    return [json.loads(line) for line in record.read_text().splitlines()]


def for_moto(document: dict[str, Any]) -> dict[str, Any]:
    """A policy as moto must read it to judge as S3 and MinIO do: they authorize HeadBucket by s3:ListBucket,
    moto asks for an action of its own, s3:HeadBucket, which is added wherever s3:ListBucket is allowed."""
    statements = [{**statement, "Action": [*statement["Action"], "s3:HeadBucket"]}
                  if "s3:ListBucket" in statement["Action"] else statement for statement in document["Statement"]]
    return {**document, "Statement": statements}


@dataclass(frozen=True)
class Store:
    url: str
    bucket: str
    keys: dict[str, tuple[str, str]]  # service -> its user's access key id and secret, as moto issued them


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    calls = run_minio_setup(tmp_path_factory.mktemp("minio-setup"))
    [bucket] = [call["args"][-1].removeprefix("local/") for call in calls if call["args"][0] == "mb"]
    documents = {call["args"][4]: call["document"] for call in calls if "document" in call}
    users = [call["args"][4] for call in calls if call["args"][:3] == ["admin", "user", "add"]]
    attached = {call["args"][-1]: call["args"][4] for call in calls
                if call["args"][:3] == ["admin", "policy", "attach"]}
    assert set(attached) == set(users) and set(attached.values()) <= set(documents), calls
    with moto_server() as url:
        setup = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        s3, iam = boto3.client("s3", **setup), boto3.client("iam", **setup)
        for name in (bucket, OTHER_BUCKET):
            s3.create_bucket(Bucket=name)
            s3.put_object(Bucket=name, Key="existing", Body=b"a blob already there")
            for service in SERVICE_USERS:  # what each service's user tries to delete (so one's success spoils none)
                s3.put_object(Bucket=name, Key=f"existing-{service}", Body=b"another blob")
        arns = {name: iam.create_policy(PolicyName=name, PolicyDocument=json.dumps(for_moto(document)))["Policy"]["Arn"]
                for name, document in documents.items()}
        issued = {}
        for user, policy in attached.items():
            iam.create_user(UserName=user)
            iam.attach_user_policy(UserName=user, PolicyArn=arns[policy])
            key = iam.create_access_key(UserName=user)["AccessKey"]
            issued[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        # Each service's user is the one its AWS_ACCESS_KEY_ID names in docker-compose.yml.
        keys = {service: issued[environment(service)["AWS_ACCESS_KEY_ID"]]
                for service in SERVICE_USERS}
        httpx.post(f"{url}/moto-api/reset-auth", content=b"0").raise_for_status()
        try:
            yield Store(url, bucket, keys)
        finally:
            httpx.post(f"{url}/moto-api/reset-auth", content=b"inf").raise_for_status()


def attempts(store: Store, service: str) -> dict[str, bool]:
    """Which S3 calls the service's user may make (True) and which are refused with AccessDenied (False)."""
    key_id, secret = store.keys[service]
    s3 = boto3.client("s3", endpoint_url=store.url, region_name="us-east-1", aws_access_key_id=key_id,
                      aws_secret_access_key=secret)
    calls = {
        "check the bucket": lambda: s3.head_bucket(Bucket=store.bucket),
        "read a blob": lambda: s3.get_object(Bucket=store.bucket, Key="existing"),
        "write a blob": lambda: s3.put_object(Bucket=store.bucket, Key=f"by-{service}", Body=b"x"),
        "delete a blob": lambda: s3.delete_object(Bucket=store.bucket, Key=f"existing-{service}"),
        "list the buckets": lambda: s3.list_buckets(),
        "read another bucket": lambda: s3.get_object(Bucket=OTHER_BUCKET, Key="existing"),
        "write another bucket": lambda: s3.put_object(Bucket=OTHER_BUCKET, Key="x", Body=b"x"),
        "create a bucket": lambda: s3.create_bucket(Bucket=f"made-by-{service}"),
        "open the bucket to all": lambda: s3.put_bucket_policy(Bucket=store.bucket, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
                                                    "Resource": f"arn:aws:s3:::{store.bucket}/*"}]})),
    }
    allowed = {}
    for what, call in calls.items():
        try:
            call()
            allowed[what] = True
        except ClientError as error:
            assert error.response["Error"]["Code"] in ("AccessDenied", "403"), (what, error.response)
            allowed[what] = False
    return allowed


READS = {"check the bucket", "read a blob"}


@pytest.mark.parametrize(("service", "may"), [("worker", READS | {"write a blob"}), ("api", READS | {"write a blob"}),
                                              ("codec", READS), ("sandbox", READS)])
def test_each_service_user_may_do_what_it_needs_and_nothing_more(store: Store, service: str, may: set[str],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    refused = aws_only_on_loopback(monkeypatch, tmp_path)
    allowed = attempts(store, service)
    assert {what for what, ok in allowed.items() if ok} == may, allowed
    assert refused == []


def settings_of(store: Store, service: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """The service's payload-store settings from docker-compose.yml, its user's keys in the environment."""
    key_id, secret = store.keys[service]
    aws_only_on_loopback(monkeypatch, tmp_path, AWS_ACCESS_KEY_ID=key_id, AWS_SECRET_ACCESS_KEY=secret)
    env = environment(service)
    names = ("DEERFLOW_PAYLOAD_STORE", "DEERFLOW_S3_BUCKET", "DEERFLOW_S3_REGION", "DEERFLOW_PAYLOAD_THRESHOLD_BYTES",
             "DEERFLOW_SUBTREES")
    return Settings.model_validate({**{name: env[name] for name in names if name in env},
                                    "DEERFLOW_S3_ENDPOINT_URL": store.url, "DEERFLOW_HOME": str(tmp_path)})


@pytest.mark.parametrize("service", ["worker", "sandbox"])
async def test_the_workers_start_with_their_users(store: Store, service: str, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """worker.py checks the bucket at start-up (head_bucket: s3:ListBucket), the sandbox's read-only user too."""
    await prepare_payload_store(settings_of(store, service, monkeypatch, tmp_path))


async def test_the_api_server_stores_a_large_input_and_the_codec_server_reads_it(
        store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    api = settings_of(store, "api", monkeypatch, tmp_path)
    [stored] = await data_converter(api).encode([BIG_TEXT])
    assert stored.ByteSize() < 2_000  # a reference to the blob the API's user wrote
    codec = settings_of(store, "codec", monkeypatch, tmp_path)
    app = create_codec_app(data_converter(codec), codec)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8081") as client:
        response = await client.post("/decode", json={"payloads": [MessageToDict(stored)]})
    assert response.status_code == 200, response.text
    [decoded] = await data_converter(codec).decode([stored], [str])
    assert decoded == BIG_TEXT
    # The codec server's user cannot store one.
    with pytest.raises(ClientError, match=r"\(AccessDenied\) when calling the PutObject operation"):
        await data_converter(codec).encode([BIG_TEXT + " from the codec server"])


def test_moto_enforces_the_policies_the_test_relies_on(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """The check itself: a key moto never issued is refused, so the allowed calls above passed a real check."""
    aws_only_on_loopback(monkeypatch, tmp_path)
    root = {"aws_access_key_id": DOT_ENV["MINIO_ROOT_USER"], "aws_secret_access_key": DOT_ENV["MINIO_ROOT_PASSWORD"]}
    s3 = boto3.client("s3", endpoint_url=store.url, region_name="us-east-1", **root)
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):
        s3.get_object(Bucket=store.bucket, Key="existing")
