"""The SDK's S3 storage driver over the SDK's own aioboto3 client, for deployments.

Workers on several machines (or in containers, with the CLI on the host) cannot share a directory,
so deployments keep payloads in S3 or an S3-compatible store such as the MinIO of
docker-compose.yml. botocore brings the standard AWS credential chain (keys and session tokens in
the environment, ``AWS_PROFILE`` with the shared files, web identity on EKS, the ECS task role, the
EC2 instance role), so our settings add only where the store is: endpoint, region, bucket, key
prefix and path-style addressing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aioboto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext, StorageDriverStoreContext

from config.settings import Settings
from storage.filesystem import PayloadStoreError
from storage.references import HASH_ALGORITHM, invalid_reference, is_sha256_hex
from storage.subtrees import SUBTREE_KEY_PREFIX

MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class S3Client(S3StorageDriverClient):
    """The SDK's aioboto3 adapter over a client opened for each call, with our key prefix.

    The converter is built synchronously and shared by every ``asyncio.run`` of a process (the CLI,
    tests), while an aiobotocore client belongs to the loop that opened it and must be closed in it:
    a client per call is always on the right loop and never left open when a loop ends. The session,
    which holds the resolved credentials, is shared, and only payloads over the threshold come here.
    The prefix is applied below the SDK's driver, so references in history keep the SDK's own key
    layout.
    """

    def __init__(self, settings: Settings) -> None:
        self.bucket = settings.s3_bucket
        self.prefix = settings.s3_key_prefix
        self._endpoint_url = settings.s3_endpoint_url
        # With an endpoint URL the store is self-hosted (MinIO): the worker may create the bucket.
        self.self_hosted = settings.s3_endpoint_url is not None
        self._region = settings.s3_region
        path_style = settings.s3_path_style if settings.s3_path_style is not None else bool(self._endpoint_url)
        self._config = Config(s3={"addressing_style": "path" if path_style else "auto"},
                              retries={"mode": "standard", "max_attempts": 3})
        self._session = aioboto3.Session()

    def describe(self) -> Mapping[str, str]:
        """Shown by the driver in its error messages: where the request went (never a credential)."""
        where = {"endpoint": self._endpoint_url or "aws"}
        return {**where, "region": self._region} if self._region else where

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Any]:
        """An aiobotocore S3 client, for the bucket calls the driver does not make (and blob gc)."""
        async with self._session.client("s3", endpoint_url=self._endpoint_url, region_name=self._region,
                                        config=self._config) as raw:
            yield raw

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        async with self.open() as raw:
            await new_aioboto3_client(raw).put_object(bucket=bucket, key=self.prefix + key, data=data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        async with self.open() as raw:
            return await new_aioboto3_client(raw).object_exists(bucket=bucket, key=self.prefix + key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        async with self.open() as raw:
            return await new_aioboto3_client(raw).get_object(bucket=bucket, key=self.prefix + key)


def error_code(error: BaseException | None) -> str | None:
    """The S3 error code of a botocore ``ClientError`` ("404", "NoSuchKey", "AccessDenied", ...)."""
    return error.response.get("Error", {}).get("Code") if isinstance(error, ClientError) else None


class GuardedS3StorageDriver(S3StorageDriver):
    """The SDK's S3 driver, refusing for good the references it could not have written.

    The SDK's driver reads whatever bucket and key a claim names, and wraps every failure in a
    retryable error. A claim must name our bucket and a key ending in its own content digest (as
    the SDK writes them), and an object missing from our bucket is refused rather than retried:
    see ``storage.references``.
    """

    def __init__(self, client: S3Client) -> None:
        super().__init__(client=client, bucket=client.bucket)
        self._s3 = client
        self._own_bucket = client.bucket

    def claim_for(self, digest: str) -> StorageDriverClaim:
        """The claim of a subtree blob (storage/subtrees.py), keyed by content alone and shared by
        every run: ``v0/d/sha256/<digest>``, the key the SDK's driver gives a payload without a target."""
        return StorageDriverClaim(claim_data={"bucket": self._own_bucket, "key": f"{SUBTREE_KEY_PREFIX}{digest}",
                                              "hash_algorithm": HASH_ALGORITHM, "hash_value": digest})

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        """Subtree blobs (no target) are written every time, never skipped when present as the SDK does:
        the write refreshes the object's age, so ``blobs gc`` cannot judge a blob a new run reuses old."""
        if context.target is not None:
            return await super().store(context, payloads)
        async def put(payload: Payload) -> StorageDriverClaim:
            data = payload.SerializeToString()
            claim = self.claim_for(hashlib.sha256(data).hexdigest())
            await self._s3.put_object(bucket=self._own_bucket, key=claim.claim_data["key"], data=data)
            return claim

        return list(await asyncio.gather(*map(put, payloads)))

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        for claim in claims:
            data = claim.claim_data
            digest = data.get("hash_value")
            if (data.get("bucket") != self._own_bucket or data.get("hash_algorithm") != HASH_ALGORITHM
                    or not is_sha256_hex(digest) or not str(data.get("key", "")).endswith(f"/d/sha256/{digest}")):
                raise invalid_reference(f"Payload claim does not name a blob of bucket {self._own_bucket!r}")
        try:
            return await super().retrieve(context, claims)
        except RuntimeError as error:
            if error_code(error.__cause__) in MISSING_CODES:
                raise invalid_reference(f"Payload blob is not in bucket {self._own_bucket!r}: {error}") from None
            # Unreachable, refused, throttled: the store's fault, so the task is retried (even for a
            # signal's payload, which runtime/message_payloads.py would otherwise refuse for good).
            raise PayloadStoreError(f"The S3 payload store cannot be read right now: {error}") from error


def s3_driver(settings: Settings, client: S3Client | None = None) -> S3StorageDriver:
    """The SDK's S3 driver over the SDK's aioboto3 client; the SDK names keys by workflow and run."""
    if not settings.s3_bucket:
        raise ValueError("DEERFLOW_PAYLOAD_STORE=s3 needs DEERFLOW_S3_BUCKET")
    return GuardedS3StorageDriver(client or S3Client(settings))


def explain(error: BaseException, client: S3Client) -> str:
    """One line an operator can act on, for a failed S3 call at start-up or in ``blobs gc``."""
    where = f"bucket {client.bucket!r} at {client.describe()['endpoint']}"
    if isinstance(error, NoCredentialsError):
        return (f"No AWS credentials for the S3 payload store ({where}): set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or AWS_PROFILE, or give the worker an IAM role")
    code = error_code(error)
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "ExpiredToken",
                "InvalidToken", "403", "AccessDenied", "Forbidden"):
        return (f"The S3 payload store refused the AWS credentials ({code}) for {where}: check AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE, and that they may read and write the bucket")
    return f"The S3 payload store ({where}) cannot be used: {error}"


async def ensure_bucket(client: S3Client) -> None:
    """Create the payload bucket of a self-hosted store (MinIO) at start-up if it is missing.

    On AWS itself (no endpoint URL) a missing bucket is an error to fix, not something a worker
    should create with whatever permissions it happens to have. Every failure is one clear line.
    """
    async with client.open() as raw:
        await _ensure_bucket(client, raw)


async def _ensure_bucket(client: S3Client, raw: Any) -> None:
    try:
        try:
            await raw.head_bucket(Bucket=client.bucket)
            return
        except ClientError as error:
            if error_code(error) not in MISSING_CODES:
                raise
        if not client.self_hosted:
            raise RuntimeError(f"The S3 payload bucket {client.bucket!r} does not exist: create it "
                               "(or set DEERFLOW_S3_BUCKET to an existing one).")
        # The region the chain settled on (DEERFLOW_S3_REGION, AWS_REGION, the profile's): S3 wants it
        # named outside us-east-1 and refuses it inside.
        region = raw.meta.region_name
        location = {} if region in (None, "us-east-1") else {
            "CreateBucketConfiguration": {"LocationConstraint": region}}
        with contextlib.suppress(raw.exceptions.BucketAlreadyOwnedByYou):
            await raw.create_bucket(Bucket=client.bucket, **location)
    except (BotoCoreError, ClientError) as error:
        raise RuntimeError(explain(error, client)) from None
