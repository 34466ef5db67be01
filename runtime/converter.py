"""The one data converter of deerflow-temporal: pydantic payloads, large ones stored outside history.

The worker, every client (starter CLI, tests) and the replayer must use :func:`data_converter`
with the same settings: a payload written to the blob store is only a reference in history, and
only a converter with the same driver (same name, same store) can turn it back into the value.

Why 32 KiB by default (``DEERFLOW_PAYLOAD_THRESHOLD_BYTES``): Temporal fails a payload over 2 MB
outright, warns at 512 KB, and caps a run's whole history at 50 MB (warning at 10 MB). The agent
loop sends the whole conversation to ``chat`` every turn, so its inputs grow with every tool result
and dominate history. At 32 KiB no single inline payload can exceed 32 KiB: plans, statuses,
prompts and short answers stay readable in the Web UI, while conversations, crawled pages and
reports go to the store. Even a 300-activity run then stays well under the 10 MB warning. Much
lower would send many small payloads through blob I/O for little gain; much higher would let a
long run's repeated conversations creep back towards the limits.

Below that threshold, the subtree codec (storage/subtrees.py, first in the codec chain) stores the
large strings, objects and arrays of JSON payloads once each in the same store, so a conversation
re-sent every turn costs history a few references, not its text again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    ExternalStorage,
    PayloadCodec,
    StorageDriver,
)

from config.settings import Settings
from runtime.encryption import EncryptionCodec, KeylessGuard, encryption_codec
from storage.filesystem import FileSystemStorageDriver
from storage.subtrees import SubtreeCodec, SubtreeDriver
from workflows.contracts.undecodable import PayloadConverter

PAYLOAD_STORES = ("filesystem", "s3", "none")


def blob_root(settings: Settings) -> Path:
    """The filesystem store's directory: ``<DEERFLOW_HOME>/blobs``."""
    return settings.home / "blobs"


def _store_name(settings: Settings) -> str:
    store = settings.payload_store.strip().lower()
    if store not in PAYLOAD_STORES:
        raise ValueError(f"DEERFLOW_PAYLOAD_STORE must be one of {', '.join(PAYLOAD_STORES)}; got {store!r}")
    return store


def storage_driver(settings: Settings) -> StorageDriver | None:
    """The driver ``DEERFLOW_PAYLOAD_STORE`` selects, or None for ``none`` (everything inline)."""
    store = _store_name(settings)
    if store == "filesystem":
        return FileSystemStorageDriver(blob_root(settings), fsync=settings.blob_fsync)
    if store == "s3":
        from storage.s3 import s3_driver  # only deployments that use S3 import its client

        return s3_driver(settings)
    return None


def subtree_codec(settings: Settings, driver: StorageDriver | None,
                  encryption: EncryptionCodec | None) -> PayloadCodec | None:
    """The codec chain: subtrees first (around encryption) when a store is configured, else encryption.

    With ``DEERFLOW_SUBTREES=false`` the codec still reads subtrees, and writes none: such a
    process can read every history and needs no write access to the store.
    """
    if driver is None:
        return encryption
    assert isinstance(driver, SubtreeDriver)
    return SubtreeCodec(driver, payload_min_bytes=settings.subtree_payload_bytes,
                        subtree_min_bytes=settings.subtree_min_bytes,
                        max_shrunk_bytes=settings.payload_threshold_bytes, inner=encryption, shrink=settings.subtrees)


def encryption_of(codec: PayloadCodec | None) -> PayloadCodec | None:
    """The encryption alone of a codec chain (None without keys), for what must never write to the
    store (the codec server's ``/encode``)."""
    if isinstance(codec, KeylessGuard):
        return None
    return codec.inner if isinstance(codec, SubtreeCodec) else codec


def with_driver(driver: StorageDriver | None, threshold_bytes: int, codec: PayloadCodec | None = None) -> DataConverter:
    """The pydantic converter, offloading payloads of ``threshold_bytes`` or more to ``driver``.

    With a ``codec`` (subtrees, encryption), every payload is encoded before it is offloaded, so
    the blob store holds ciphertext too; with encryption, failure messages and stack traces travel as encoded
    attributes: an error quoting a page or a report would otherwise stay readable in history.
    """
    converter = DataConverter(payload_converter_class=PayloadConverter)
    if codec is not None:
        converter = dataclasses.replace(converter, payload_codec=codec)
    if encryption_of(codec) is not None:
        converter = dataclasses.replace(converter, failure_converter_class=DefaultFailureConverterWithEncodedAttributes)
    if driver is None:
        return converter
    storage = ExternalStorage(drivers=[driver], payload_size_threshold=threshold_bytes)
    return dataclasses.replace(converter, external_storage=storage)


def data_converter(settings: Settings) -> DataConverter:
    """The converter for the worker, every client, the replayer and the codec server, from the
    process's settings (its payload store and its encryption keys)."""
    driver = storage_driver(settings)
    encryption = encryption_codec(settings)
    codec = subtree_codec(settings, driver, encryption)
    if encryption is None:  # encrypted payloads are refused by name, not misread
        codec = KeylessGuard(codec)
    return with_driver(driver, settings.payload_threshold_bytes, codec)


async def prepare_payload_store(settings: Settings) -> None:
    """Make the configured store ready at worker start-up, so the first large payload cannot fail.

    Filesystem: creates ``<home>/blobs``. S3: creates the bucket on a self-hosted store (MinIO)
    if it is missing, and fails clearly when an AWS bucket is missing or unreachable.
    """
    store = _store_name(settings)
    if store == "filesystem":
        blob_root(settings).mkdir(parents=True, exist_ok=True)
    elif store == "s3":
        from storage.s3 import S3Client, ensure_bucket

        await ensure_bucket(S3Client(settings))
