"""A message the worker could not decode, as a value the workflow can refuse (issue #19 item 3).

The worker decodes every payload of a workflow task (blob store, subtrees, encryption) before
workflow code runs, so an error there fails the whole task: retried for ever when retryable (a
reference to a missing blob: the run wedges), or the run fails (tampered ciphertext). The worker's
converter (``runtime/message_payloads.py``) therefore passes a signal's or update's payload that
cannot be decoded on as a marker payload of this module's encoding, and this payload converter
turns the marker into an ``Undecodable`` value: a signal records it as ignored, an update's
validator rejects it, and a start input fails as an invalid request, each naming the reason.
Markers exist only while a worker decodes: they never reach history or a client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import EncodingPayloadConverter

ENCODING = "deerflow/undecodable"
MAX_REASON = 300


@dataclass(frozen=True)
class Undecodable:
    """What the workflow receives in place of a payload the worker could not decode."""

    reason: str


def marker(reason: str) -> Payload:
    """The payload standing for one the worker could not decode."""
    return Payload(metadata={"encoding": ENCODING.encode()}, data=reason[:MAX_REASON].encode("utf-8", "replace"))


class UndecodableConverter(EncodingPayloadConverter):
    """Reads markers only (whatever the type asked for); writes nothing."""

    @property
    def encoding(self) -> str:
        return ENCODING

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Undecodable:
        return Undecodable(payload.data.decode("utf-8", "replace")[:MAX_REASON])


class PayloadConverter(PydanticPayloadConverter):
    """The pydantic converter of every process, which also reads the worker's markers."""

    def __init__(self) -> None:
        super().__init__()
        self.converters[ENCODING.encode()] = UndecodableConverter()
