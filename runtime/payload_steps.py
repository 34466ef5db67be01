"""The data converter's payload-to-payload steps, for readers that need payloads, not values.

The codec server (Temporal's remote codec protocol) and a self-contained history export both
need what ``DataConverter.decode`` produces *before* it turns payloads into Python values: the
reference resolved from the blob store, the subtrees put back, the payload decrypted. The SDK
exposes those steps only as private methods, so they are wrapped here once;
tests/test_codec_server.py holds them to the worker's own reading.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter

from runtime.converter import encryption_of


async def decode_payloads(converter: DataConverter, payloads: Sequence[Payload]) -> list[Payload]:
    """What ``DataConverter.decode`` does before it converts payloads to values, in its order."""
    payloads = await converter._decode_reference_payload_sequence(payloads)
    payloads = await converter._external_retrieve_payload_sequence(payloads)
    return await converter._decode_payload_sequence(payloads)


async def encrypt_payloads(converter: DataConverter, payloads: Sequence[Payload]) -> list[Payload]:
    """Encryption alone, when configured: the payloads stay inline and nothing is written to the store."""
    codec = encryption_of(converter.payload_codec)
    return await codec.encode(payloads) if codec is not None else list(payloads)
