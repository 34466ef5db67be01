"""Provider quotas (issue #26): the fleet's requests per second, a worker's tokens per minute.

Why: a provider's quota is the whole fleet's, so the request cap must be the model queue's (Temporal's
task-queue rate limit, which every poller of the queue shares) and model calls must pass through
that queue; the tokens-per-minute quota is kept per process with a leaky bucket. The fleet itself,
two worker processes on a dev server, is tests/test_fleet_quota.py.
"""

from __future__ import annotations

import time

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from activities.run_config import main_queue_kinds
from activities.support.limits import spend_tokens
from cli.config_view import lines
from config.config_files import ConfigError
from config.settings import Settings, load_settings
from hosting.registry import build_workers
from offline.model_server import FakeModelServer
from tests.support.chat_requests import COORDINATOR
from tests.support.history_checks import activity_events
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.calls.queues import QUEUE_KINDS, queue_name


async def test_the_request_cap_reaches_the_model_queues_worker_only(time_worker: Client,
                                                              provider_env: dict[str, str]) -> None:
    settings = settings_with(provider_env, LLM_REQUESTS_PER_SECOND="4.5")
    workers = build_workers(time_worker, settings, QUEUE_KINDS, main_queue="quota-a")
    caps = {worker.task_queue: worker.config().get("max_task_queue_activities_per_second") for worker in workers}
    assert caps == {"quota-a": None, "quota-a-model": 4.5, "quota-a-tools": None, "quota-a-sandbox": None}
    uncapped = build_workers(time_worker, settings_with(provider_env), ("model",), main_queue="quota-b")
    assert uncapped[0].config().get("max_task_queue_activities_per_second") is None


def test_under_a_request_cap_model_calls_keep_their_own_queue(provider_env: dict[str, str]) -> None:
    """An eager call is handed straight back to the worker, past the queue and so past its cap."""
    capped = settings_with(provider_env, LLM_REQUESTS_PER_SECOND="2")
    assert main_queue_kinds(capped, QUEUE_KINDS) == ["tools"]
    assert main_queue_kinds(settings_with(provider_env), QUEUE_KINDS) == ["model", "tools"]


@pytest.mark.parametrize(("name", "value"), [("LLM_REQUESTS_PER_SECOND", "0"), ("LLM_REQUESTS_PER_SECOND", "-1"),
                                             ("LLM_REQUESTS_PER_SECOND", "fast"), ("LLM_TPM", "0"),
                                             ("LLM_TPM", "1.5")])
def test_a_quota_that_means_nothing_is_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_settings(environ={name: value})


def test_the_quotas_show_in_the_configuration() -> None:
    shown = lines(load_settings(environ={"LLM_REQUESTS_PER_SECOND": "4", "LLM_TPM": "90000"}))
    assert "LLM_REQUESTS_PER_SECOND = 4.0  (environment)" in shown
    assert "LLM_TPM = 90000  (environment)" in shown
    assert "LLM_TPM = null  (default)" in lines(load_settings(environ={}))


def scheduled_chat_queues(history: WorkflowHistory) -> set[str]:
    return {events[0].activity_task_scheduled_event_attributes.task_queue.name
            for events in activity_events(history).values()
            if events[0].activity_task_scheduled_event_attributes.activity_type.name == "chat"}


async def test_a_capped_worker_sends_every_model_call_of_its_runs_through_the_model_queue(
    worker_with: WorkerWith, provider_env: dict[str, str]
) -> None:
    async with worker_with(settings_with(provider_env, LLM_REQUESTS_PER_SECOND="50")) as client:
        handle = await start(client, auto_accept_plan=True)
        await handle.result()
    main = (await handle.describe()).task_queue
    assert scheduled_chat_queues(await handle.fetch_history()) == {queue_name("model", main)}


async def test_a_tokens_per_minute_bucket_lets_a_minute_through_then_drips() -> None:
    # 60,000 a minute is 1,000 a second: the first minute's worth passes at once, the next 500 wait ~0.5 s.
    began = time.monotonic()
    await spend_tokens(60_000, 60_000)
    assert time.monotonic() - began < 0.2
    await spend_tokens(60_000, 500)
    assert 0.35 < time.monotonic() - began < 2.0
    await spend_tokens(None, 10**9)  # no quota: nothing waits
    await spend_tokens(61_000, 10**9)  # more than a minute's worth: the whole bucket, not an error
    assert time.monotonic() - began < 2.5


async def timed_chat(settings: Settings) -> float:
    began = time.monotonic()
    await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)
    return time.monotonic() - began


async def test_a_model_call_waits_for_its_tokens_in_the_workers_bucket(
    provider_env: dict[str, str], model_server: FakeModelServer
) -> None:
    """A call counts its prompt plus its output cap (4,096 here, about 5,000 in all). With 100,000
    tokens a minute (1,667 a second) and the bucket just filled by other calls, it waits about 3 s."""
    free = await timed_chat(settings_with(provider_env))  # also the first call's imports, out of the timing
    free = min(free, await timed_chat(settings_with(provider_env)))
    await spend_tokens(100_000, 100_000)
    quota = await timed_chat(settings_with(provider_env, LLM_TPM="100000"))
    assert quota > free + 1.5, f"the call did not wait for its tokens ({quota:.2f} s against {free:.2f} s)"
    assert len(model_server.requests) == 3
