"""Workers for the tests on the time-skipping server: the session's, and one of a test's own.

A test that needs other settings (a short timeout, a voice, a layout of directories) runs its own
worker on a task queue of its own, as samples-python does, instead of changing the settings of a
worker other tests share: the activities are built with the settings once, as worker.py builds
them, and nothing in the product has to allow swapping them afterwards. The run's model, tools and
sandbox queues are named after the queue it is on (workflows/calls/queues.py), so the test's run keeps
all its work on the test's worker.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio import client as temporal_client
from temporalio.client import Client, StartWorkflowInput, WorkflowHandle
from temporalio.worker import Worker

from activities.guards.secret_scrubber import SecretScrubber
from config.settings import Settings
from hosting.registry import build_workers, running
from hosting.scrub_interceptor import SecretScrubbingInterceptor
from workflows.contracts.research import TASK_QUEUE

# The ``worker_with`` fixture's type: ``async with worker_with(settings) as client``.
WorkerWith = Callable[[Settings], contextlib.AbstractAsyncContextManager[Client]]


def harness_workers(client: Client, settings: Settings, main_queue: str = TASK_QUEUE) -> list[Worker]:
    """The real workflows and activities on every queue kind, behind the secret scrubber, as worker.py
    runs them (without the journal and telemetry, which their own tests start)."""
    scrubber = SecretScrubbingInterceptor(SecretScrubber.for_settings(settings))
    return build_workers(client, settings, main_queue=main_queue, interceptors=[scrubber])


class _StartsOn(temporal_client.Interceptor):
    """Sends the workflows a client starts on the default queue to ``queue`` instead."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    def intercept_client(self, next: temporal_client.OutboundInterceptor) -> temporal_client.OutboundInterceptor:
        return _StartsOnOutbound(next, self.queue)


class _StartsOnOutbound(temporal_client.OutboundInterceptor):
    def __init__(self, next: temporal_client.OutboundInterceptor, queue: str) -> None:
        super().__init__(next)
        self.queue = queue

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        if input.task_queue == TASK_QUEUE:
            input.task_queue = self.queue
        return await super().start_workflow(input)


@contextlib.asynccontextmanager
async def own_worker(client: Client, settings: Settings) -> AsyncIterator[Client]:
    """Run a worker built with ``settings`` on a fresh task queue until the block ends; yields a
    client whose workflows, started on the default queue, go to that queue instead.

    The routing lets code that always starts on the default queue (the API server, the CLI's
    commands) use the test's worker unchanged; :func:`tests.support.runs.start` goes through it too.
    """
    queue = f"test-{uuid.uuid4().hex[:8]}"
    config = client.config()
    routed = Client(**{**config, "interceptors": [*config["interceptors"], _StartsOn(queue)]})
    async with running(harness_workers(client, settings, main_queue=queue)):
        yield routed
