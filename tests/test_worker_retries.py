"""A starved worker slows a run down and never fails it; a provider that stays down still does (issue #19).

On the time-skipping server with the real workflow and the real activities, except that the model
call is a fake registered under the real name: on the reporter's attempts a test picks it withholds
its heartbeats, as a worker whose event loop is starved does, until the SDK gives the attempt up at
its heartbeat timeout (4 s of real time each: the server does not skip time while an attempt runs);
on the others it is the real chat activity against the fake model server.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from hosting.registry import build_workers, queue_activities, running
from offline.model_server import FakeModelServer, Fault
from tests.support.chat_requests import probe_requests
from tests.support.runs import start
from tests.support.settings import settings_with
from workflows.calls.activity_options import CHAT
from workflows.calls.errors import failure_message
from workflows.contracts.chat import ChatRequest, ChatResponse
from workflows.contracts.research import Outcome

# More lost attempts in a row than the model call's attempt limit had (6), and than it has now for
# the provider's errors.
STALLED_ATTEMPTS = 7
assert CHAT.provider_attempts is not None and CHAT.provider_attempts < STALLED_ATTEMPTS
# Real seconds a run may take here: its lost attempts cost 4 s each, more under load.
RUN_SECONDS = 180


@dataclass
class StallingChat:
    """The real ``chat``, except on the reporter's attempts in ``stalled``: those never beat."""

    real: Callable[[ChatRequest], Awaitable[ChatResponse]]
    stalled: Collection[int]
    lost: list[int] = field(default_factory=list)

    @activity.defn(name="chat")
    async def chat(self, request: ChatRequest) -> ChatResponse:
        attempt = activity.info().attempt
        if request.prompt == "reporter" and attempt in self.stalled:
            self.lost.append(attempt)
            await asyncio.Event().wait()  # until the SDK cancels it at its heartbeat timeout
        return await self.real(request)


StallingWorker = Callable[..., contextlib.AbstractAsyncContextManager[tuple[str, StallingChat]]]


@pytest.fixture
def stalling_worker(time_env: WorkflowEnvironment, provider_env: dict[str, str]) -> StallingWorker:
    """``async with stalling_worker(stalled, **settings) as (queue, fake)``: a worker on a queue
    of its own whose reporter call stalls on the attempts in ``stalled``."""

    @contextlib.asynccontextmanager
    async def worker(stalled: Collection[int], **overrides: str) -> AsyncIterator[tuple[str, StallingChat]]:
        settings = settings_with(provider_env, **overrides)
        activities = queue_activities(settings)
        [real] = activities["model"]
        fake = StallingChat(real=real, stalled=stalled)
        activities["model"] = [fake.chat]
        activities["main"] = [fake.chat if function is real else function for function in activities["main"]]
        queue = f"stall-{uuid.uuid4().hex[:8]}"
        async with running(build_workers(time_env.client, settings, main_queue=queue, activities=activities)):
            yield queue, fake

    return worker


def events(history: WorkflowHistory, event_type: EventType.ValueType) -> list:
    return [event for event in history.events if event.event_type == event_type]


def reporter_attempt(history: WorkflowHistory) -> int:
    """The attempt the reporter's call (the run's last model call) ended on."""
    last_chat = [event for event in events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
                 if event.activity_task_scheduled_event_attributes.activity_type.name == "chat"][-1]
    [started] = [event for event in events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
                 if event.activity_task_started_event_attributes.scheduled_event_id == last_chat.event_id]
    return started.activity_task_started_event_attributes.attempt


async def test_a_model_call_whose_heartbeats_stall_more_often_than_any_count_limit_still_completes(
    time_env: WorkflowEnvironment, stalling_worker: StallingWorker, model_server: FakeModelServer,
) -> None:
    async with stalling_worker(range(1, STALLED_ATTEMPTS + 1)) as (queue, fake):
        handle = await start(time_env.client, task_queue=queue, auto_accept_plan=True, max_step_num=1)
        result = await asyncio.wait_for(handle.result(), RUN_SECONDS)
    assert result.outcome is Outcome.REPORT and result.report
    assert fake.lost == list(range(1, STALLED_ATTEMPTS + 1))
    history = await handle.fetch_history()
    assert reporter_attempt(history) == STALLED_ATTEMPTS + 1
    # Nothing that completed ran twice: every call was scheduled once and completed once, and the
    # model was asked once per completed model call (the lost attempts never reached it), besides the
    # tool-support probe a turn may make (issue #24).
    scheduled = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    completed = {event.activity_task_completed_event_attributes.scheduled_event_id
                 for event in events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)}
    assert completed == {event.event_id for event in scheduled}
    chats = [event for event in scheduled
             if event.activity_task_scheduled_event_attributes.activity_type.name == "chat"]
    assert len(model_server.requests) - len(probe_requests(model_server.requests)) == len(chats)
    assert len(model_server.requests_for("reporter")) == 1


async def test_the_providers_errors_stay_bounded_between_lost_attempts(
    time_env: WorkflowEnvironment, stalling_worker: StallingWorker, model_server: FakeModelServer,
) -> None:
    """Lost attempts do not count against the provider, nor make it forget the errors it gave."""
    assert CHAT.provider_attempts == 6
    model_server.inject(*[Fault.status(503, "upstream overloaded", agent="reporter") for _ in range(10)])
    async with stalling_worker({1, 3, 5}) as (queue, fake):
        handle = await start(time_env.client, task_queue=queue, auto_accept_plan=True, max_step_num=1)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), RUN_SECONDS)
    message = failure_message(failed.value.cause)
    assert "reporting" in message and "HTTP 503" in message and "upstream overloaded" in message
    assert fake.lost == [1, 3, 5]
    # Six provider errors (attempts 2, 4, 6, 7, 8, 9), the last one final; three lost attempts between.
    assert reporter_attempt(await handle.fetch_history()) == 9
    assert len(model_server.requests_for("reporter")) == 6 and len(model_server.pending_faults) == 4


async def test_lost_attempts_end_after_the_operators_retry_window(
    time_env: WorkflowEnvironment, stalling_worker: StallingWorker, model_server: FakeModelServer,
) -> None:
    async with stalling_worker(range(1, 100), DEERFLOW_WORKER_RETRY_WINDOW="1") as (queue, fake):
        handle = await start(time_env.client, task_queue=queue, auto_accept_plan=True, max_step_num=1)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), RUN_SECONDS)
    message = failure_message(failed.value.cause)
    assert "reporting" in message and "DEERFLOW_WORKER_RETRY_WINDOW (0:00:01)" in message
    assert fake.lost == [1]  # the retry came later than the window: given up before it ran
    assert not model_server.requests_for("reporter")
