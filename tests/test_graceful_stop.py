"""A deploy stops a worker with SIGTERM in the middle of a model call: the call finishes there, once.

Real processes: the dev server, two ``worker.py`` processes and this process's fake model, which
holds the planner's call open for ``HELD_SECONDS`` (more than twice the call's 4 s heartbeat
timeout, so the stopping worker must keep heartbeating it). Worker A gets SIGTERM while the call is
in flight and worker B is started beside it, as a rolling deploy does. From the run's history:
the call completed on A in attempt 1 (the model was paid once), A exited, and the run went on to
completion on B without waiting for A's sticky queue longer than the server's hand-over.

A second signal stops a worker at once: the call in flight is handed back (``WorkerLost``) and
retried on the other worker without waiting for its heartbeat timeout. A call that outlasts the
grace is cancelled by the SDK at its end and retried on the other worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError

from hosting.reclaim import WORKER_LOST
from offline.model_server import FakeModelServer, Fault
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from tests.support.crash_drill import RUN_TIMEOUT, wait_until
from tests.support.history_checks import (
    COMPLETED,
    STARTED,
    WORKFLOW_TASK_COMPLETED,
    activity_events,
    event_time,
    process_of,
    retried_activities,
    retry_causes,
    wait_for_poller,
    worker_identity,
)
from tests.support.processes import DevServer, WorkerProcess, exit_code, wait_for_worker
from tests.support.runs import QUESTION, run_id
from workflows.calls.queues import QUEUE_KINDS, queue_name
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

HELD_SECONDS = 10.0  # the planner's call; > 2x the model call's heartbeat timeout (4 s)
HELD_LONG_SECONDS = 40.0  # the planner's call when a second signal is to end it: far beyond a forced stop
FORCED_EXIT_SECONDS = 15.0  # a forced stop hands back its calls (at most 5 s) and exits
SHORT_GRACE_SECONDS = 3  # a grace the held call outlasts
GRACE_SECONDS = 60  # the workers' DEERFLOW_WORKER_SHUTDOWN_GRACE: far above HELD_SECONDS
# From the later of A's exit and B's first poll to B's first workflow task: the server moves a task
# off a stopped worker's sticky queue within the worker's 2 s sticky timeout (worker.py).
HAND_OVER_LIMIT_SECONDS = 15.0


class Workers:
    """The test's worker processes, each stopped (SIGKILL) at the end whatever happened."""

    def __init__(self, address: str, env: dict[str, str], log_dir: Path) -> None:
        self.address, self.env, self.log_dir = address, env, log_dir
        self.started: list[WorkerProcess] = []

    def start(self, name: str) -> WorkerProcess:
        worker = WorkerProcess(self.address, self.log_dir / f"{name}.log", env=self.env).start()
        self.started.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self.started:
            worker.kill()


@pytest.fixture(params=["eager", "split"])
def workers(request: pytest.FixtureRequest, dev_server: DevServer, model_server: FakeModelServer,
            search_server: FakeSearchServer, tmp_path: Path) -> Iterator[Workers]:
    """``eager``: model calls on the run's main queue (the default); ``split``: on the model queue's
    worker, which drains while the main queue's worker of the same process must poll no more."""
    env = {**offline_env(model_server, search_server), "DEERFLOW_WORKER_SHUTDOWN_GRACE": str(GRACE_SECONDS),
           "DEERFLOW_EAGER_ACTIVITIES": str(request.param == "eager").lower()}
    started = Workers(dev_server.address, env, tmp_path)
    yield started
    started.kill_all()
    model_server.clear_faults()


@pytest.fixture
async def handles(client: Client) -> AsyncIterator[list[WorkflowHandle]]:
    """Runs to terminate should the test fail before they finish."""
    started: list[WorkflowHandle] = []
    yield started
    for handle in started:
        with contextlib.suppress(RPCError):
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("graceful stop test cleanup")


def identity_of(worker: WorkerProcess) -> str:
    assert worker.process is not None
    return worker_identity(worker.process.pid)


async def start_run(client: Client, prefix: str) -> WorkflowHandle:
    return await client.start_workflow(
        WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True), id=run_id(prefix),
        task_queue=TASK_QUEUE, result_type=ResearchResult)


async def planner_in_flight(client: Client, model_server: FakeModelServer, worker: WorkerProcess,
                            prefix: str, held_seconds: float) -> WorkflowHandle:
    """Start a run on ``worker`` and return once its planner's model call is held open at the fake."""
    await wait_for_poller(client, identity_of(worker))
    model_server.inject(Fault.timeout(held_seconds, agent="planner"))
    before = len(model_server.requests_for("planner"))  # the fake serves the whole session
    handle = await start_run(client, prefix)
    await wait_until(lambda: len(model_server.requests_for("planner")) == before + 1, "the planner's call")
    return handle


def planner_activity(history: WorkflowHistory, held_since: datetime) -> str:
    """The ID of the model call in flight at ``held_since``: scheduled before it, completed after it."""
    in_flight = [activity_id for activity_id, events in activity_events(history).items()
                 if event_time(events[0]) <= held_since
                 and any(event.event_type == COMPLETED and event_time(event) > held_since for event in events)]
    assert len(in_flight) == 1, in_flight
    return in_flight[0]


def first_workflow_task_after(history: WorkflowHistory, event_id: int) -> tuple[str, datetime]:
    for event in history.events:
        if event.event_id > event_id and event.event_type == WORKFLOW_TASK_COMPLETED:
            return process_of(event.workflow_task_completed_event_attributes.identity), event_time(event)
    raise AssertionError(f"no workflow task completed after event {event_id}")


async def test_sigterm_lets_the_model_call_in_flight_finish_and_the_run_moves_on(
        client: Client, workers: Workers, model_server: FakeModelServer, handles: list[WorkflowHandle]) -> None:
    first = workers.start("worker-a")
    planner_calls = len(model_server.requests_for("planner"))
    handle = await planner_in_flight(client, model_server, first, "graceful-stop", HELD_SECONDS)
    handles.append(handle)
    held_since = datetime.now(UTC)
    second = workers.start("worker-b")  # the deploy's new worker, starting beside the old one
    assert first.process is not None
    first.process.send_signal(signal.SIGTERM)  # as `docker compose stop` does, to the main process
    stopped_at = time.monotonic()
    await asyncio.sleep(1.0)
    assert first.process.poll() is None, "the worker left with a call in flight"
    later = await start_run(client, "started-while-draining")  # no worker of A's may take it
    handles.append(later)

    assert await exit_code(first, timeout=GRACE_SECONDS) == 0
    exited_at = datetime.now(UTC)
    drained_seconds = time.monotonic() - stopped_at
    await wait_for_poller(client, identity_of(second))
    polled_at = datetime.now(UTC)
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    assert result.report.strip()
    assert (await asyncio.wait_for(later.result(), RUN_TIMEOUT)).report.strip()

    a, b = identity_of(first), identity_of(second)
    later_history = await later.fetch_history()
    assert {process_of(event.workflow_task_completed_event_attributes.identity) for event in later_history.events
            if event.event_type == WORKFLOW_TASK_COMPLETED} == {b}, "the stopping worker took new work"
    history = await handle.fetch_history()
    planner = planner_activity(history, held_since)
    events = activity_events(history)[planner]
    [started] = [event for event in events if event.event_type == STARTED]
    [completed] = [event for event in events if event.event_type == COMPLETED]
    # The call in flight finished where it ran, in its first attempt: the model was paid once.
    assert started.activity_task_started_event_attributes.attempt == 1
    assert process_of(started.activity_task_started_event_attributes.identity) == a
    assert process_of(completed.activity_task_completed_event_attributes.identity) == a
    # One per run: the held call was not made again.
    assert len(model_server.requests_for("planner")) == planner_calls + 2
    assert retried_activities(history) == {}
    # The stopping worker took no workflow task after its call: the run went on on B, promptly.
    identity, moved_at = first_workflow_task_after(history, completed.event_id)
    assert identity == b, f"the workflow task after the call went to {identity}, not the new worker {b}"
    hand_over = (moved_at - max(exited_at, polled_at)).total_seconds()
    print(f"A drained in {drained_seconds:.1f} s (the call was held {HELD_SECONDS:.0f} s); "
          f"B took the run {hand_over:.1f} s after A exited and B polled")
    assert hand_over < HAND_OVER_LIMIT_SECONDS
    workflow_tasks = [process_of(event.workflow_task_completed_event_attributes.identity) for event in history.events
                      if event.event_type == WORKFLOW_TASK_COMPLETED and event.event_id > completed.event_id]
    assert set(workflow_tasks) == {b}


@pytest.mark.parametrize("workers", ["eager"], indirect=True)
async def test_a_second_signal_stops_at_once_and_hands_the_call_back(
        client: Client, workers: Workers, model_server: FakeModelServer, handles: list[WorkflowHandle]) -> None:
    first = workers.start("worker-a")
    handle = await planner_in_flight(client, model_server, first, "forced-stop", HELD_LONG_SECONDS)
    handles.append(handle)
    second = workers.start("worker-b")
    await wait_for_poller(client, identity_of(second))  # B is there to take the call handed back
    assert first.process is not None
    first.process.send_signal(signal.SIGTERM)
    await asyncio.sleep(1.0)  # the first signal's drain is under way
    assert first.process.poll() is None, "one signal must not end a worker with a call in flight"
    os.kill(first.process.pid, signal.SIGINT)  # Ctrl-C, the second time
    stopped_at = time.monotonic()
    assert await exit_code(first, timeout=FORCED_EXIT_SECONDS) != 0
    print(f"A left {time.monotonic() - stopped_at:.1f} s after the second signal")
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    assert result.report.strip()

    history = await handle.fetch_history()
    # Handed back, not left to its heartbeat timeout, and run again on B.
    assert list(retry_causes(history).values()) == [WORKER_LOST]
    [(activity_id, (kind, attempt))] = retried_activities(history).items()
    assert (kind, attempt) == ("chat", 2)
    [completed] = [event for event in activity_events(history)[activity_id] if event.event_type == COMPLETED]
    assert process_of(completed.activity_task_completed_event_attributes.identity) == identity_of(second)
    assert not any(event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT for event in history.events)


@pytest.mark.parametrize("workers", ["eager"], indirect=True)
async def test_a_call_outlasting_the_grace_is_cancelled_and_retried_elsewhere(
        client: Client, workers: Workers, model_server: FakeModelServer, handles: list[WorkflowHandle]) -> None:
    workers.env = {**workers.env, "DEERFLOW_WORKER_SHUTDOWN_GRACE": str(SHORT_GRACE_SECONDS)}
    first = workers.start("worker-a")
    handle = await planner_in_flight(client, model_server, first, "grace-expired", HELD_LONG_SECONDS)
    handles.append(handle)
    second = workers.start("worker-b")
    assert first.process is not None
    first.process.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    assert await exit_code(first, timeout=SHORT_GRACE_SECONDS + FORCED_EXIT_SECONDS) == 0
    assert time.monotonic() - stopped_at >= SHORT_GRACE_SECONDS  # the grace was given
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    assert result.report.strip()

    history = await handle.fetch_history()
    assert list(retry_causes(history).values()) == ["WorkerShutdown"]  # the SDK's cancellation at the grace's end
    [(activity_id, (kind, attempt))] = retried_activities(history).items()
    [completed] = [event for event in activity_events(history)[activity_id] if event.event_type == COMPLETED]
    assert (kind, attempt) == ("chat", 2)
    assert process_of(completed.activity_task_completed_event_attributes.identity) == identity_of(second)


async def test_a_stopped_worker_says_it_is_stopping_once_and_that_it_stopped(
        dev_server: DevServer, client: Client, tmp_path: Path) -> None:
    """One line for the signal, none of the SDK's per-queue "Beginning worker shutdown" (four for one
    process), and a last line saying the worker stopped."""
    worker = WorkerProcess(dev_server.address, tmp_path / "worker.log").start()
    await wait_for_worker(client, worker.log_path)
    assert worker.process is not None
    os.killpg(worker.process.pid, signal.SIGTERM)
    assert await exit_code(worker, 60) == 0
    log = worker.log_path.read_text()
    assert log.count("SIGTERM: no new work") == 1 and "Beginning worker shutdown" not in log, log
    stopped = [line for line in log.splitlines() if "Worker stopped: " in line]
    assert len(stopped) == 1 and all(queue_name(kind) in stopped[0] for kind in QUEUE_KINDS), log
