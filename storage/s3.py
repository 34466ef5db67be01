"""The SDK's S3 storage driver over a small httpx client with AWS Signature V4, for deployments.

Workers on several machines (or in containers, with the CLI on the host) cannot share a directory,
so deployments keep payloads in S3 or an S3-compatible store such as the MinIO of
docker-compose.yml. The three object calls the driver needs (PUT, GET, HEAD) plus bucket creation
are small enough to sign here, which avoids pulling aioboto3/aiobotocore into the worker image.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import hmac
import weakref
from collections.abc import Mapping, Sequence
from urllib.parse import quote, urlsplit
from xml.sax.saxutils import escape

import httpx
from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext

from activities.settings import Settings
from storage.references import HASH_ALGORITHM, invalid_reference, is_sha256_hex

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"


class S3Error(RuntimeError):
    """An S3 request failed; carries the HTTP status so callers can tell 404 from the rest."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


def _uri_encode(value: str, *, keep_slash: bool) -> str:
    """AWS's UriEncode: everything but unreserved characters (and '/' in paths) as %XX."""
    return quote(value, safe="-_.~/" if keep_slash else "-_.~")


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).digest()


class SigV4S3Client(S3StorageDriverClient):
    """An :class:`S3StorageDriverClient` that signs its own requests (AWS Signature Version 4).

    With an ``endpoint_url`` (MinIO, moto, any S3-compatible store) it uses path-style URLs,
    ``<endpoint>/<bucket>/<key>``, which need no wildcard DNS; without one it talks to AWS itself
    with virtual-hosted URLs, ``https://<bucket>.s3.<region>.amazonaws.com/<key>``.
    """

    def __init__(
        self,
        *,
        access_key_id: str,
        secret_access_key: str,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        session_token: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not access_key_id or not secret_access_key:
            raise ValueError("S3 payload storage needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        if endpoint_url is not None:
            parts = urlsplit(endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"DEERFLOW_S3_ENDPOINT_URL must be an http(s) URL, got {endpoint_url!r}")
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self._region = region
        self._endpoint_url = endpoint_url.rstrip("/") if endpoint_url else None
        self._session_token = session_token
        self._timeout = timeout
        # One pooled client per event loop: httpx connections belong to the loop that opened
        # them, and one converter may serve several loops (asyncio.run in the CLI, tests).
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def describe(self) -> Mapping[str, str]:
        """Shown by the driver in its error messages: where the request went."""
        return {"endpoint": self._endpoint_url or f"aws ({self._region})", "region": self._region}

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # trust_env=False: proxies from the environment must not redirect signed requests.
            client = httpx.AsyncClient(timeout=self._timeout, trust_env=False)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the current loop's connection pool (optional: the process may just exit)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def _url(self, bucket: str, key: str | None) -> tuple[str, str]:
        """The request URL and its canonical (already encoded) path."""
        if self._endpoint_url is not None:
            parts = urlsplit(self._endpoint_url)
            base = parts.path.rstrip("/")
            path = f"{base}/{_uri_encode(bucket, keep_slash=False)}"
            if key is not None:
                path += "/" + _uri_encode(key, keep_slash=True)
            return f"{parts.scheme}://{parts.netloc}{path}", path
        path = "/" + _uri_encode(key, keep_slash=True) if key is not None else "/"
        return f"https://{bucket}.s3.{self._region}.amazonaws.com{path}", path

    def _signed_headers(self, method: str, url: str, path: str, body: bytes) -> dict[str, str]:
        now = datetime.datetime.now(datetime.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        date = amz_date[:8]
        payload_hash = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        headers = {
            "host": urlsplit(url).netloc,
            "x-amz-content-sha256": payload_hash,
            "x-amz-date": amz_date,
        }
        if self._session_token:
            headers["x-amz-security-token"] = self._session_token
        names = sorted(headers)
        canonical_headers = "".join(f"{name}:{headers[name].strip()}\n" for name in names)
        signed_headers = ";".join(names)
        canonical_request = "\n".join([method, path, "", canonical_headers, signed_headers, payload_hash])
        scope = f"{date}/{self._region}/s3/aws4_request"
        string_to_sign = "\n".join(
            [_ALGORITHM, amz_date, scope, hashlib.sha256(canonical_request.encode("utf-8")).hexdigest()]
        )
        key = _hmac(("AWS4" + self._secret_access_key).encode("utf-8"), date)
        for part in (self._region, "s3", "aws4_request"):
            key = _hmac(key, part)
        signature = hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"{_ALGORITHM} Credential={self._access_key_id}/{scope}, "
            f"SignedHeaders={signed_headers}, Signature={signature}"
        )
        return headers

    async def _request(self, method: str, bucket: str, key: str | None, body: bytes = b"") -> httpx.Response:
        url, path = self._url(bucket, key)
        headers = self._signed_headers(method, url, path, body)
        # PUT always carries a Content-Length (0 for an empty CreateBucket); GET and HEAD carry no body.
        return await self._http().request(method, url, headers=headers, content=body if method == "PUT" else None)

    @staticmethod
    def _error(response: httpx.Response, what: str) -> S3Error:
        detail = response.text[:500].strip() if response.request.method != "HEAD" else ""
        return S3Error(f"S3 {what} failed: HTTP {response.status_code} {detail}".rstrip(), response.status_code)

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        """One PUT: the driver caps payloads at 50 MiB, far below S3's 5 GiB single-PUT limit."""
        response = await self._request("PUT", bucket, key, data)
        if response.status_code != 200:
            raise self._error(response, "PutObject")

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        """HEAD the object; 404 means absent (a 403 without s3:ListBucket is raised, not guessed)."""
        response = await self._request("HEAD", bucket, key)
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise self._error(response, "HeadObject")

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        response = await self._request("GET", bucket, key)
        if response.status_code != 200:
            raise self._error(response, "GetObject")
        return response.content

    async def bucket_exists(self, bucket: str) -> bool:
        response = await self._request("HEAD", bucket, None)
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise self._error(response, "HeadBucket")

    async def create_bucket(self, bucket: str) -> None:
        """Create the bucket; one that already exists and is ours counts as created."""
        body = b""
        if self._region != "us-east-1":
            body = (
                '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<LocationConstraint>{escape(self._region)}</LocationConstraint></CreateBucketConfiguration>"
            ).encode()
        response = await self._request("PUT", bucket, None, body)
        if response.status_code == 200 or (
            response.status_code == 409 and "BucketAlreadyOwnedByYou" in response.text
        ):
            return
        raise self._error(response, f"CreateBucket {bucket}")


def s3_client(settings: Settings) -> SigV4S3Client:
    """The S3 client configured by DEERFLOW_S3_* and the AWS_* credentials in ``settings``."""
    if not settings.s3_access_key_id or not settings.s3_secret_access_key:
        raise ValueError(
            "DEERFLOW_PAYLOAD_STORE=s3 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(for MinIO: its MINIO_ROOT_USER and MINIO_ROOT_PASSWORD)"
        )
    return SigV4S3Client(
        access_key_id=settings.s3_access_key_id,
        secret_access_key=settings.s3_secret_access_key,
        region=settings.s3_region,
        endpoint_url=settings.s3_endpoint_url,
    )


class GuardedS3StorageDriver(S3StorageDriver):
    """The SDK's S3 driver, refusing for good the references it could not have written.

    The SDK's driver reads whatever bucket and key a claim names, and wraps every failure in a
    retryable error. A claim must name our bucket and a key ending in its own content digest (as
    the SDK writes them), and an object missing from our bucket is refused rather than retried:
    see ``storage.references``.
    """

    def __init__(self, client: S3StorageDriverClient, bucket: str) -> None:
        super().__init__(client=client, bucket=bucket)
        self._own_bucket = bucket

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
            if isinstance(error.__cause__, S3Error) and error.__cause__.status_code == 404:
                raise invalid_reference(f"Payload blob is not in bucket {self._own_bucket!r}: {error}") from None
            raise


def s3_driver(settings: Settings, client: S3StorageDriverClient | None = None) -> S3StorageDriver:
    """The SDK's S3 driver over our client; keys are namespaced by workflow/activity by the SDK."""
    if not settings.s3_bucket:
        raise ValueError("DEERFLOW_PAYLOAD_STORE=s3 needs DEERFLOW_S3_BUCKET")
    return GuardedS3StorageDriver(client=client or s3_client(settings), bucket=settings.s3_bucket)


async def ensure_bucket(settings: Settings, client: SigV4S3Client | None = None) -> None:
    """Create the payload bucket of a self-hosted store (MinIO) at start-up if it is missing.

    On AWS itself (no endpoint URL) a missing bucket is an error to fix, not something a worker
    should create with whatever permissions it happens to have.
    """
    client = client or s3_client(settings)
    if await client.bucket_exists(settings.s3_bucket):
        return
    if settings.s3_endpoint_url is None:
        raise RuntimeError(
            f"The S3 payload bucket {settings.s3_bucket!r} does not exist in {settings.s3_region}: create it "
            "(or set DEERFLOW_S3_BUCKET to an existing one)."
        )
    await client.create_bucket(settings.s3_bucket)
