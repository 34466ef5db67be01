"""Writing and reading a content flow's file in the blob store (workflows/contracts/artefact.py).

The file goes through the same driver and encryption as every large payload, wrapped as one
binary payload, so an operator's store, encryption keys and blob collector cover it too. The
collector keeps blobs that histories name; a file's reference sits inside a result, so it is kept
for the collector's age margin (7 days by default), which is all a download needs.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import StorageDriverClaim, StorageDriverRetrieveContext, StorageDriverStoreContext

from config.settings import Settings
from runtime.converter import storage_driver
from runtime.encryption import encryption_codec
from workflows.contracts.artefact import ArtefactRef

ENCODING = b"binary/plain"


async def put(settings: Settings, data: bytes) -> ArtefactRef:
    driver: Any = storage_driver(settings)
    if driver is None:
        return ArtefactRef(size=len(data), inline=data)
    payloads = [Payload(metadata={"encoding": ENCODING}, data=data)]
    codec = encryption_codec(settings)
    if codec is not None:
        payloads = await codec.encode(payloads)
    [claim] = await driver.store(StorageDriverStoreContext(), payloads)
    return ArtefactRef(claim=dict(claim.claim_data), size=len(data))


async def get(settings: Settings, ref: ArtefactRef) -> bytes:
    if ref.inline is not None:
        return ref.inline
    driver: Any = storage_driver(settings)
    if driver is None:
        raise LookupError("the file is in a blob store, but DEERFLOW_PAYLOAD_STORE is none here")
    payloads = await driver.retrieve(StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=ref.claim)])
    codec = encryption_codec(settings)
    if codec is not None:
        payloads = await codec.decode(payloads)
    return bytes(payloads[0].data)
