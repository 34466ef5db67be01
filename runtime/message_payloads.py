"""The worker's converter: a signal or update it cannot decode reaches the workflow as a marker.

Why here: the SDK decodes every payload of a workflow task (reference codec, blob store, codec
chain) in the worker, outside the workflow, before any handler runs. A payload that fails there
fails the whole task: a retryable error (a reference to a blob that does not exist) is retried
for ever and wedges the run; a non-retryable one (tampered ciphertext, an unknown key id, a
forged subtree reference) fails the run. Anyone who may signal a run can send such a payload.

So, in the workflow's own serialization context (its start input, signals, updates and queries;
activity results are decoded in theirs and keep their errors), a payload whose decoding fails
becomes a marker (``workflows/contracts/undecodable.py``) that the workflow refuses like any unusable
message. Failures of *this worker* are not the payload's fault and still fail the task, so that
the server retries it, here or on a worker that can: no encryption keys (``EncryptionKeysMissing``)
and a blob store that cannot be read right now (``PayloadStoreError``).

Only workers (and the replayer, which must decode as they did) use this converter; clients keep
the shared one and see every error as it is. Activities decode in their own context: for them it
only adds the log line of a worker without keys.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Self

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import DataConverter, SerializationContext, WorkflowSerializationContext

from runtime.encryption import EncryptionKeysMissing, KeylessGuard
from storage.filesystem import PayloadStoreError
from workflows.contracts.undecodable import marker

logger = logging.getLogger(__name__)
# The worker's own shortcomings: the task must fail and be retried, not the message be dropped.
WORKER_FAULTS = (EncryptionKeysMissing, PayloadStoreError)

Step = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


@dataclass(frozen=True)
class WorkerDataConverter(DataConverter):
    """The shared converter, with undecodable payloads of the workflow's context turned into markers."""

    messages: bool = False  # bound to a workflow's own context: its payloads come from clients

    def with_context(self, context: SerializationContext) -> Self:
        bound = super().with_context(context)
        messages = isinstance(context, WorkflowSerializationContext)
        if bound.messages == messages:
            return bound
        clone = copy.copy(bound)  # not dataclasses.replace: that builds new converters (~150 us a task)
        object.__setattr__(clone, "messages", messages)
        return clone

    async def _decode_reference_payload_sequence(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._tolerant(super()._decode_reference_payload_sequence, payloads)

    async def _external_retrieve_payload_sequence(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._tolerant(super()._external_retrieve_payload_sequence, payloads)

    async def _decode_payload_sequence(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._tolerant(super()._decode_payload_sequence, payloads)

    async def _tolerant(self, step: Step, payloads: Sequence[Payload]) -> list[Payload]:
        if not self.messages:
            return await step(payloads)
        try:
            return await step(payloads)
        except WORKER_FAULTS:
            raise
        except Exception:  # one bad payload: decode the others alone, so only it is refused
            return [await _one(step, payload) for payload in payloads]


async def _one(step: Step, payload: Payload) -> Payload:
    try:
        [decoded] = await step([payload])
    except WORKER_FAULTS:
        raise
    except Exception as error:
        reason = f"{type(error).__name__}: {error}"
        logger.warning("A message to a workflow could not be decoded; the workflow refuses it: %s", reason[:500])
        return marker(f"the payload could not be decoded ({reason})")
    return decoded


def worker_converter(converter: DataConverter) -> WorkerDataConverter:
    """``converter`` (the shared one, runtime/converter.py) as the worker's, which also logs each
    encrypted payload it refuses for want of keys."""
    fields = {field.name: getattr(converter, field.name) for field in dataclasses.fields(DataConverter) if field.init}
    if isinstance(converter.payload_codec, KeylessGuard):
        fields["payload_codec"] = converter.payload_codec.loud()
    return WorkerDataConverter(**fields)


def worker_client(client: Client) -> Client:
    """``client`` with the worker's converter, for building workers (same connection, same settings)."""
    if isinstance(client.data_converter, WorkerDataConverter):
        return client
    return Client(**{**client.config(), "data_converter": worker_converter(client.data_converter)})
