"""Where things live: the home folder, the resource roots, the claim-check payload store (filesystem
or S3) with its content-addressed subtrees, and the payloads' encryption keys."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from config.groups.base import SettingsGroup


class StorageSettings(SettingsGroup):
    """Files and blobs every worker, client and replayer must agree on."""

    # Where embedded state lives (dev-server db, indexes, blobs).
    # Absolute by default, so the CLI (run from anywhere) and the worker (run from the repo) agree.
    home: Path = Field(default=Path(__file__).resolve().parents[2] / ".deerflow", alias="DEERFLOW_HOME")
    """Embedded server database, logs, pid files, blobs and the document index."""

    # Resource roots: the only folders whose files a run's ``resources`` may name
    # (config/resources.py). Unset: ``<home>/resources``, a folder that holds nothing but
    # what someone put there to be searched. Env: paths separated by os.pathsep (":" on Linux, like
    # PATH); conf.yaml: ``RESOURCE_ROOTS`` as a list. ``conf_path`` is protected like the home.
    resource_roots: list[Path] | None = Field(default=None, alias="DEERFLOW_RESOURCE_ROOTS")
    """Folders (`:`-separated; a list in conf.yaml) whose files runs may use as resources. Unset:
    `DEERFLOW_HOME/resources`.
    """
    conf_path: Path = Field(default=Path("conf.yaml"), alias="DEERFLOW_CONF")
    """The conf.yaml read."""
    # The .env file read. Both are set by load_settings to the files it read, absolute, so the
    # processes a front door starts (cwd: the repository) read the same files (runtime/embedded.py).
    env_file: Path = Field(default=Path(".env"), alias="DEERFLOW_ENV_FILE")
    """The `.env` file read."""

    @field_validator("resource_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [root.strip() for root in value.split(os.pathsep) if root.strip()]
        return value

    def allowed_resource_roots(self) -> list[Path]:
        """The roots, absolute and symlink-free, so containment is checked on real paths."""
        roots = self.resource_roots if self.resource_roots is not None else [self.home / "resources"]
        return [root.expanduser().resolve() for root in roots]

    # Large-payload storage (runtime/converter.py): payloads at or above the threshold are written
    # to a blob store and history keeps only a small reference. "filesystem" (<home>/blobs), "s3"
    # or "none". Every worker, client and replayer must share the same store.
    payload_store: str = Field(default="filesystem", alias="DEERFLOW_PAYLOAD_STORE")
    """Where payloads over the threshold go: `filesystem`, `s3` or `none` (see Payload storage)."""
    payload_threshold_bytes: int = Field(default=32_768, ge=0, alias="DEERFLOW_PAYLOAD_THRESHOLD_BYTES")
    """Payloads of at least this size go to the store."""
    # Content-addressed JSON subtrees (storage/subtrees.py), in the same store: in a JSON payload of
    # at least DEERFLOW_SUBTREE_PAYLOAD_BYTES, each string, object or array of at least
    # DEERFLOW_SUBTREE_MIN_BYTES (one a history reference of 78 bytes replaces) is stored once and
    # history keeps the reference; only activity inputs and results are shrunk. DEERFLOW_SUBTREES=false
    # writes none (still reads them: the sandbox worker's read-only store user); none with
    # DEERFLOW_PAYLOAD_STORE=none.
    subtrees: bool = Field(default=True, alias="DEERFLOW_SUBTREES")
    """Large parts of activity payloads stored once in the blob store; `false` reads them but writes none."""
    subtree_payload_bytes: int = Field(default=1024, ge=0, alias="DEERFLOW_SUBTREE_PAYLOAD_BYTES")
    """Payloads of at least this size are split into subtrees."""
    subtree_min_bytes: int = Field(default=256, ge=128, alias="DEERFLOW_SUBTREE_MIN_BYTES")
    """The smallest subtree stored on its own."""
    # The filesystem store fsyncs each new blob before history can name it (about 1 ms on a VM disk,
    # per new subtree). false: faster, but an OS crash or power loss may lose blobs that history
    # names; only for a store on tmpfs, or when the Temporal server's own storage is not durable either.
    blob_fsync: bool = Field(default=True, alias="DEERFLOW_BLOB_FSYNC")
    """The filesystem store fsyncs each new blob and its directory."""
    # The S3 store (storage/s3.py) takes its credentials from the standard AWS chain (AWS_ACCESS_KEY_ID/
    # AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, AWS_PROFILE with the shared files, web identity, the
    # instance or task role), read by botocore itself: none of them is a setting here.
    s3_bucket: str = Field(default="deerflow-payloads", alias="DEERFLOW_S3_BUCKET")
    """The S3 store's bucket (credentials: the standard AWS chain)."""
    s3_endpoint_url: str | None = Field(default=None, alias="DEERFLOW_S3_ENDPOINT_URL")  # None: AWS itself
    """A self-hosted store such as MinIO. Unset: AWS."""
    # None: the chain's region (AWS_REGION, AWS_DEFAULT_REGION, the profile), else us-east-1.
    s3_region: str | None = Field(default=None, alias="DEERFLOW_S3_REGION")
    """The bucket's region. Unset: the AWS chain's."""
    # Prepended to every object key, e.g. "deerflow/" to share a bucket (and scope an IAM policy).
    s3_key_prefix: str = Field(default="", pattern=r"^([A-Za-z0-9!_.*'()-]+/)*$", alias="DEERFLOW_S3_KEY_PREFIX")
    """Prepended to every object key (`deerflow/`)."""
    # Path-style URLs (<endpoint>/<bucket>/<key>), which need no wildcard DNS. None: path-style
    # exactly when DEERFLOW_S3_ENDPOINT_URL names a self-hosted store (MinIO).
    s3_path_style: bool | None = Field(default=None, alias="DEERFLOW_S3_PATH_STYLE")
    """Path-style URLs (`<endpoint>/<bucket>/<key>`). Unset: path-style with an endpoint."""

    # Payload encryption (runtime/encryption.py). Keys: ``id:base64key`` entries (comma-separated,
    # or one a line in the key file), the first the active one; unset: payloads are not encrypted.
    encryption_keys: str | None = Field(default=None, alias="DEERFLOW_ENCRYPTION_KEYS")
    """Payload encryption keys, `id:base64key` comma-separated, the first the active one (see Encryption keys)."""
    encryption_key_file: Path | None = Field(default=None, alias="DEERFLOW_ENCRYPTION_KEY_FILE")
    """The same keys, one a line in a file."""
