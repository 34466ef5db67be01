"""runtime/workflow_runner.py: serialization contexts answered outside the sandbox, same answers.

The codec decides per payload from its context (storage/subtrees.py shrinks activity payloads
only), so the runner must hand it exactly what the SDK's own sandboxed instance would: the probe
workflow's payloads are encoded and decoded under both runners and the contexts compared. The
workflow's own code must still run in the sandbox.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any, Self

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, _runner

from runtime.workflow_runner import workflow_runner
from tests.support.context_probe import CONTEXT_PROBE_QUEUE, ContextProbe, echo


class RecordingCodec(PayloadCodec, WithSerializationContext):
    """Passes payloads through, noting the context it was bound to for each call."""

    def __init__(self, seen: list[tuple[str, Any]], context: SerializationContext | None = None) -> None:
        self._seen = seen
        self._context = context

    def with_context(self, context: SerializationContext) -> Self:
        return type(self)(self._seen, context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self._seen.extend(("encode", self._context) for _ in payloads)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self._seen.extend(("decode", self._context) for _ in payloads)
        return list(payloads)


async def run_probe(env: WorkflowEnvironment, runner: WorkflowRunner) -> tuple[tuple[str, bool], list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []
    converter = dataclasses.replace(DataConverter.default, payload_codec=RecordingCodec(seen))
    client = Client(env.client.service_client, namespace=env.client.namespace, data_converter=converter)
    async with Worker(client, task_queue=CONTEXT_PROBE_QUEUE, workflows=[ContextProbe], activities=[echo],
                      workflow_runner=runner):
        result = await client.execute_workflow(ContextProbe.run, "hello", id="context-probe",
                                               task_queue=CONTEXT_PROBE_QUEUE)
    return tuple(result), seen


@pytest.fixture
def sandbox_lookups(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """How often the SDK's sandboxed instance was asked for a context (entering the sandbox)."""
    calls: collections.Counter[str] = collections.Counter()
    for name in ("get_serialization_context", "get_external_store_context"):
        original = getattr(_runner._Instance, name)

        def counted(self: Any, command_info: Any, _original: Any = original, _name: str = name) -> Any:
            calls[_name] += 1
            return _original(self, command_info)

        monkeypatch.setattr(_runner._Instance, name, counted)
    return calls


async def test_the_codec_sees_the_same_contexts_without_entering_the_sandbox(
    time_env: WorkflowEnvironment, sandbox_lookups: collections.Counter[str]
) -> None:
    stock_result, stock_seen = await run_probe(time_env, SandboxedWorkflowRunner())
    assert sandbox_lookups["get_serialization_context"] > 0  # the count can see lookups
    sandbox_lookups.clear()

    result, seen = await run_probe(time_env, workflow_runner())

    assert result == stock_result == ("hello", True)  # the workflow's code still ran in the sandbox
    assert sandbox_lookups == {}
    assert collections.Counter(map(repr, seen)) == collections.Counter(map(repr, stock_seen))
    activity_input = [context for kind, context in seen if kind == "encode"
                      and isinstance(context, ActivitySerializationContext) and not context.is_local]
    assert activity_input and all(context.activity_type == "echo" for context in activity_input)
