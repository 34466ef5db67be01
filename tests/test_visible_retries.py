"""Retries a person can see (issue #11), on the real dev server with the real chat activity.

While a model call is retried, ``describe()`` lists it as a pending activity with its attempt and
last failure; ``status`` and ``watch`` show that as one line. The failure must reach the server
with the provider's message intact: a failure that carried langchain's, openai's and httpx's
chained tracebacks exceeded the server's size limit and read "Failure exceeds size limit.".
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from temporalio.client import Client, WorkflowHandle

from activities.guards.secret_scrubber import SecretScrubber
from activities.model.llm import MAX_FAILURE_MESSAGE_CHARS, classify_provider_error
from cli.render import status_text
from cli.watch import Watcher
from hosting.registry import build_workers, running
from hosting.scrub_interceptor import SecretScrubbingInterceptor
from offline.model_server import FakeModelServer, Fault
from runtime.retries import retries_of
from server.access import LOCAL
from server.live import TokenHub
from server.runs import Runs
from server.uploads import Uploads
from tests.support.runs import QUESTION
from tests.support.settings import settings_with
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.status import RunStatus
from workflows.research.status_view import retry_line

# What vLLM or a gateway may say: long, but the user needs all of it.
PROVIDER_MESSAGE = "The upstream model is overloaded; " + "please retry later. " * 60 + "(request id abc123)"


@pytest.fixture
async def worker(client: Client, provider_env: dict[str, str]) -> AsyncIterator[Client]:
    settings = settings_with(provider_env)
    queue = f"{TASK_QUEUE}-{uuid.uuid4().hex[:6]}"
    interceptors = [SecretScrubbingInterceptor(SecretScrubber.for_settings(settings))]
    async with running(build_workers(client, settings, main_queue=queue, interceptors=interceptors)):
        client.task_queue = queue  # type: ignore[attr-defined]
        yield client


async def start(client: Client) -> WorkflowHandle:
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    return await client.start_workflow(WORKFLOW_TYPE, request, id=f"retry-{uuid.uuid4().hex[:8]}",
                                       task_queue=client.task_queue,  # type: ignore[attr-defined]
                                       result_type=ResearchResult)


async def retrying(handle: WorkflowHandle, timeout: float = 20) -> object:
    """The first pending activity once it has failed at least once."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if pending and pending[0].HasField("last_failure"):
            return pending[0]
        assert asyncio.get_running_loop().time() < deadline, "no retry became visible"
        await asyncio.sleep(0.2)


async def test_a_retried_calls_failure_reaches_the_server_with_the_providers_message(
    worker: Client, model_server: FakeModelServer, provider_env: dict[str, str]
) -> None:
    model_server.inject(*[Fault.status(503, PROVIDER_MESSAGE, agent="coordinator")] * 3)
    handle = await start(worker)
    try:
        pending = await retrying(handle)
        failure = pending.last_failure  # type: ignore[attr-defined]
        assert failure.message == f"Model provider returned HTTP 503: {PROVIDER_MESSAGE}"
        assert failure.application_failure_info.type == "ModelProviderUnavailable"
        assert not failure.HasField("cause")  # the chain stays in the worker's log
        assert pending.activity_type.name == "chat"  # type: ignore[attr-defined]

        retries = retries_of((await handle.describe()).raw_description)
        # No attempt limit: lost attempts retry for the operator's window, the provider's errors 6 times.
        assert [(retry.call, retry.attempt, retry.maximum_attempts) for retry in retries] == [("chat", 2, 0)]
        status = await handle.query("status", result_type=RunStatus)
        line = ("Retrying chat while coordinating: attempt 2, last error: Model provider returned HTTP 503: "
                "The upstream model is overloaded; please retry later.")
        assert line in status_text(handle.id, status, retries=retries)
        settings = settings_with(provider_env)
        runs = Runs(worker, settings, TokenHub(settings), Uploads(settings))
        shown = await runs.show(handle.id, LOCAL)  # the web page's view
        assert shown["retries"] == [retry_line(retries[0], status)] and line in shown["retries"][0]
        for live in (False, True):
            out = io.StringIO()
            await Watcher(live=live, out=out).follow(handle, until=lambda _: True)
            assert "Retrying chat while coordinating: attempt 2, last error" in out.getvalue(), out.getvalue()
    finally:
        await handle.terminate("test finished")


def test_a_provider_message_past_the_failures_budget_keeps_its_head_and_tail() -> None:
    """A provider that echoes a whole prompt in its error: cut to fit, never lost."""
    echoed = "Prompt too long: " + "x" * 20_000 + " (n_ctx 4096)"
    response = httpx.Response(400, json={"error": {"message": echoed}},
                              request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    error = classify_provider_error(openai.BadRequestError("bad", response=response, body=response.json()))
    assert len(error.message) < MAX_FAILURE_MESSAGE_CHARS + 100
    assert error.message.startswith("Model provider returned HTTP 400: Prompt too long: xxx")
    assert error.message.endswith("x (n_ctx 4096)") and "[…]" in error.message
