"""Crash recovery with the real dev server and real worker processes, at every kind of kill point.

Each test kills the worker with SIGKILL (the whole process group, like a machine dying) or
restarts the Temporal server mid-run, and then checks, from the run's history:

(a) the run completes and every plan step has its finding;
(b) no activity that had completed before the crash ran again (one Scheduled event, and one
    Started event on attempt 1, per completed activity), and only the call in flight is retried;
(c) the run resumes within ``RESUME_LIMIT`` of the new worker process starting: the first
    activity or workflow task completed by the new worker is recorded less than 30 s after its
    process was launched (for the server restart: after the server is back).

The workers talk to the session's fake model and search servers in this process, so a test can
hold one specific request open (an injected delay aimed at one agent) and kill the worker
exactly while that request is in flight, and can count every model call the run made, including
the one lost with the dead worker. Nothing else is slowed down.

Time: a killed worker's in-flight activity is only given up when its heartbeat timeout (15 s)
expires, plus the retry back-off (2 s for ``chat``, 1 s for ``web_search``); those three tests
take about 20-25 s each. A worker takes 10-20 s to start on a loaded 2-core machine, so the
replacement worker of one test is handed to the next (``WorkerSlot``) instead of starting afresh.
Run with ``-rP`` to see the measured resume times.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError

from offline.model_server import FakeModelServer, Fault
from offline.scripted_agents import detect_agent
from offline.search_server import FakeSearchServer
from offline.search_server import Fault as SearchFault
from tests.conftest import run_id
from tests.history_checks import (
    COMPLETED,
    activity_events,
    activity_types,
    assert_not_rerun,
    completed_activity_ids,
    event_time,
    first_progress,
    retried_activities,
    wait_for_poller,
    worker_identity,
)
from tests.processes import DevServer, WorkerProcess
from workflows.models import TASK_QUEUE, WORKFLOW_TYPE, Phase, ResearchRequest, ResearchResult, RunStatus

QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
RESUME_LIMIT = timedelta(seconds=30)
# How long the request the worker dies in is held open; far longer than a kill takes to land.
HELD_OPEN_SECONDS = 30.0
RUN_TIMEOUT = 120.0

# ---------------------------------------------------------------- servers and workers


class WorkerSlot:
    """The one live worker process of this module, replaced by each crash and handed on.

    Starting ``worker.py`` costs 10-20 s here (imports), so each test takes over the worker the
    previous test started as its replacement rather than starting one of its own.
    """

    def __init__(self, address: str, client: Client, model: FakeModelServer, search: FakeSearchServer,
                 log_dir: Path) -> None:
        self.address = address
        self.client = client
        self.model = model
        self.search = search
        self.env = {
            "OPENAI_API_KEY": "offline", "OPENAI_BASE_URL": model.base_url, "BASIC_MODEL": "deerflow-offline-demo",
            "TAVILY_API_KEY": "offline", "TAVILY_BASE_URL": search.base_url, "DEERFLOW_OFFLINE_DEMO": "1",
        }
        self.log_dir = log_dir
        self.current: WorkerProcess | None = None
        self.started_at = datetime.now(UTC)
        self._count = 0

    def launch(self) -> WorkerProcess:
        """Start a worker process now, without waiting for it to connect (the clock starts here)."""
        self._count += 1
        self.started_at = datetime.now(UTC)
        self.current = WorkerProcess(self.address, self.log_dir / f"worker-{self._count}.log", env=self.env).start()
        return self.current

    @property
    def identity(self) -> str:
        assert self.current is not None and self.current.process is not None
        return worker_identity(self.current.process.pid)

    async def live(self) -> WorkerProcess:
        """The current worker, polling; a new one if there is none (or it has died)."""
        if self.current is None or self.current.process is None or self.current.process.poll() is not None:
            self.launch()
        await wait_for_poller(self.client, self.identity)
        assert self.current is not None
        return self.current

    def kill(self) -> None:
        assert self.current is not None
        self.current.kill()

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()


@pytest.fixture(scope="module")
async def workers(dev_server: DevServer, client: Client, model_server: FakeModelServer,
                  search_server: FakeSearchServer, tmp_path_factory: pytest.TempPathFactory,
                  ) -> AsyncIterator[WorkerSlot]:
    """Workers use this process's fakes: a test can hold one request open and count every call."""
    slot = WorkerSlot(dev_server.address, client, model_server, search_server, tmp_path_factory.mktemp("workers"))
    yield slot
    slot.stop()


# ---------------------------------------------------------------- helpers


async def start_run(client: Client, prefix: str, auto_accept: bool = True) -> WorkflowHandle:
    return await client.start_workflow(
        WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=auto_accept), id=run_id(prefix),
        task_queue=TASK_QUEUE, result_type=ResearchResult,
    )


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def wait_for_status(handle: WorkflowHandle, predicate: Callable[[RunStatus], bool], what: str,
                          timeout: float = 60.0) -> RunStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {status.phase} {status.events[-3:]}"
        await asyncio.sleep(0.05)


def agent_calls(model_server: FakeModelServer, agent: str) -> int:
    """Model requests the fake has received for one DeerFlow agent (lost ones included)."""
    return sum(1 for body in list(model_server.requests) if detect_agent(body.get("messages") or []) == agent)


def in_flight(history: WorkflowHistory) -> dict[str, str]:
    """Activity ID -> type of every activity scheduled but not completed."""
    names = activity_types(history)
    return {activity_id: names[activity_id] for activity_id, events in activity_events(history).items()
            if not any(event.event_type == COMPLETED for event in events)}


@dataclass
class Recovery:
    """What a crash test checks after the run has finished."""

    result: ResearchResult
    history: WorkflowHistory
    completed_before: set[str]
    in_flight_before: dict[str, str]
    resume_seconds: float  # new worker launched -> its first completed task
    startup_seconds: float  # new worker launched -> it polls
    killed_seconds: float  # old worker killed -> the new worker's first completed task
    searches_before: int  # search requests the fake had received when the worker was killed


async def kill_and_recover(handle: WorkflowHandle, workers: WorkerSlot, before_signal: bool = False) -> Recovery:
    """SIGKILL the worker, start a new one at once, and wait for the run to finish on it.

    Delays injected to hold a call open are dropped once the worker is dead, so the retry (or a
    call the dead worker never got to send) is not held too. ``before_signal``: the run is paused
    for review; once the new worker polls, accept the plan.
    """
    workers.kill()
    killed_at = datetime.now(UTC)
    searches_before = len(workers.search.requests)
    workers.model.clear_faults()
    workers.search.clear_faults()
    before = await handle.fetch_history()
    workers.launch()
    started_at, identity = workers.started_at, workers.identity
    await wait_for_poller(workers.client, identity)
    startup = (datetime.now(UTC) - started_at).total_seconds()
    if before_signal:
        await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await asyncio.wait_for(handle.result(), timeout=RUN_TIMEOUT)
    history = await handle.fetch_history()
    progress = first_progress(history, since=started_at, identity=identity)
    assert progress is not None, "the new worker completed nothing"
    return Recovery(result, history, completed_activity_ids(before), in_flight(before),
                    resume_seconds=(event_time(progress) - started_at).total_seconds(), startup_seconds=startup,
                    killed_seconds=(event_time(progress) - killed_at).total_seconds(), searches_before=searches_before)


def assert_complete(result: ResearchResult) -> None:
    """(a): a report, and a finding for every step of the plan."""
    assert result.plan is not None and result.plan.steps
    assert all(step.execution_res for step in result.plan.steps), [s.title for s in result.plan.steps]
    assert result.report.strip()


def assert_resumed_in_time(recovery: Recovery, kill_point: str,
                           record_property: Callable[[str, object], None]) -> None:
    """(c), and the figures are recorded (``-rP`` shows them; junit XML keeps them as properties)."""
    seconds = recovery.resume_seconds
    print(f"resume after {kill_point}: {seconds:.1f} s from the new worker's launch to its first completed task "
          f"(it polled after {recovery.startup_seconds:.1f} s; {recovery.killed_seconds:.1f} s after the kill)")
    record_property("resume_seconds", round(seconds, 2))
    record_property("worker_startup_seconds", round(recovery.startup_seconds, 2))
    record_property("seconds_after_kill", round(recovery.killed_seconds, 2))
    assert 0 < seconds < RESUME_LIMIT.total_seconds(), f"resumed {seconds:.1f} s after the new worker's launch"


@pytest.fixture
async def cleanup(client: Client) -> AsyncIterator[list[WorkflowHandle]]:
    """Terminate a test's run if the test failed before it finished, so it cannot leak into the next."""
    handles: list[WorkflowHandle] = []
    yield handles
    for handle in handles:
        with contextlib.suppress(RPCError):  # e.g. the server is down after a failed restart test
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("crash test cleanup")


# ---------------------------------------------------------------- worker killed (SIGKILL)


async def test_kill_during_a_model_call(client: Client, workers: WorkerSlot, model_server: FakeModelServer,
                                        cleanup: list[WorkflowHandle],
                                        record_property: Callable[[str, object], None]) -> None:
    """The worker dies inside the planner's model call: that one call is made again, nothing else."""
    await workers.live()
    model_server.inject(Fault.timeout(HELD_OPEN_SECONDS, agent="planner"))
    handle = await start_run(client, "crash-model")
    cleanup.append(handle)
    await wait_until(lambda: agent_calls(model_server, "planner") == 1, "the planner's call")

    recovery = await kill_and_recover(handle, workers)

    assert_complete(recovery.result)
    assert {"load_run_config", "chat", "web_search"} <= set(activity_types(recovery.history).values())
    assert len(recovery.completed_before) == 3  # run config, coordinator, background search
    assert list(recovery.in_flight_before.values()) == ["chat"]
    assert_not_rerun(recovery.completed_before, recovery.history)
    assert retried_activities(recovery.history) == {aid: ("chat", 2) for aid in recovery.in_flight_before}
    assert agent_calls(model_server, "planner") == 2
    # Crash cost: exactly one model call more than the run's own (the one lost with the worker).
    assert len(model_server.requests) == recovery.result.usage.llm_calls + 1
    assert_resumed_in_time(recovery, "a kill in a model call", record_property)


async def test_kill_during_a_tool_call(client: Client, workers: WorkerSlot, model_server: FakeModelServer,
                                       search_server: FakeSearchServer, cleanup: list[WorkflowHandle],
                                       record_property: Callable[[str, object], None]) -> None:
    """The worker dies inside a researcher's web_search: the search is retried, no model call is redone."""
    await workers.live()
    handle = await start_run(client, "crash-tool")
    cleanup.append(handle)
    # Once the planner is asked, the background search is over: hold the next search (the researcher's).
    await wait_until(lambda: agent_calls(model_server, "planner") == 1, "the planner's call")
    search_server.inject(SearchFault.timeout(HELD_OPEN_SECONDS))
    await wait_until(lambda: len(search_server.requests) == 2, "the researcher's search")

    recovery = await kill_and_recover(handle, workers)

    assert_complete(recovery.result)
    assert list(recovery.in_flight_before.values()) == ["web_search"]
    assert_not_rerun(recovery.completed_before, recovery.history)
    assert retried_activities(recovery.history) == {aid: ("web_search", 2) for aid in recovery.in_flight_before}
    assert recovery.searches_before == 2  # background search, and the one lost with the worker
    assert len(model_server.requests) == recovery.result.usage.llm_calls  # no model call was lost
    assert_resumed_in_time(recovery, "a kill in a tool call", record_property)


async def test_kill_between_steps(client: Client, workers: WorkerSlot, model_server: FakeModelServer,
                                  cleanup: list[WorkflowHandle],
                                  record_property: Callable[[str, object], None]) -> None:
    """The worker dies right after step 1 is done, before step 2's first model turn comes back."""
    await workers.live()
    # Step 1's two researcher turns pass (a zero delay); step 2's first turn is held open.
    model_server.inject(Fault.timeout(0, agent="researcher"), Fault.timeout(0, agent="researcher"),
                        Fault.timeout(HELD_OPEN_SECONDS, agent="researcher"))
    handle = await start_run(client, "crash-between")
    cleanup.append(handle)
    status = await wait_for_status(
        handle, lambda s: any(e.kind == "step_done" and e.step_index == 0 for e in s.events), "step 1 done")
    assert status.phase is Phase.RESEARCHING and status.steps[1].state.value == "running"

    recovery = await kill_and_recover(handle, workers)

    assert_complete(recovery.result)
    assert list(recovery.in_flight_before.values()) == ["chat"]  # step 2's first turn, not back yet
    assert_not_rerun(recovery.completed_before, recovery.history)
    # That turn was handed to the dead worker (so it is retried) if the kill came after its start;
    # its request reached the model only if the kill came later still: at most one call is lost.
    assert set(retried_activities(recovery.history).values()) <= {("chat", 2)}
    assert set(retried_activities(recovery.history)) <= set(recovery.in_flight_before)
    assert agent_calls(model_server, "researcher") in (4, 5)
    assert len(model_server.requests) - recovery.result.usage.llm_calls in (0, 1)
    assert_resumed_in_time(recovery, "a kill between steps", record_property)


async def test_kill_while_waiting_for_review(client: Client, workers: WorkerSlot, model_server: FakeModelServer,
                                             cleanup: list[WorkflowHandle],
                                             record_property: Callable[[str, object], None]) -> None:
    """The worker dies while the run waits for a person; the plan is accepted on the new worker.

    Nothing is in flight, so nothing is retried. The signal's workflow task may first be offered
    to the dead worker's sticky queue and only move to the shared queue after the SDK's
    ``sticky_queue_schedule_to_start_timeout`` (10 s), unless the server has already noticed that
    no one polls the sticky queue: so resume is about max(worker start-up, 10 s) here.
    """
    await workers.live()
    handle = await start_run(client, "crash-review", auto_accept=False)
    cleanup.append(handle)
    await wait_for_status(handle, lambda s: s.phase is Phase.AWAITING_REVIEW, "the plan review")

    recovery = await kill_and_recover(handle, workers, before_signal=True)

    assert_complete(recovery.result)
    assert recovery.in_flight_before == {}  # a paused run has nothing in flight
    assert_not_rerun(recovery.completed_before, recovery.history)
    assert retried_activities(recovery.history) == {}
    assert len(model_server.requests) == recovery.result.usage.llm_calls
    assert_resumed_in_time(recovery, "a kill while awaiting review", record_property)


# ---------------------------------------------------------------- server restarted


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_server_restart_mid_run(client: Client, dev_server: DevServer, workers: WorkerSlot,
                                      model_server: FakeModelServer, cleanup: list[WorkflowHandle],
                                      sig: signal.Signals, record_property: Callable[[str, object], None]) -> None:
    """The dev server goes down for a few seconds mid-step and comes back on the same port and database.

    The worker process survives it: its polls, and the completion of the model call that finished
    while the server was down, are retried by the SDK until the server answers again. So nothing
    is lost and no activity runs twice.
    """
    worker = await workers.live()
    model_server.inject(Fault.timeout(1.0, agent="researcher"))
    handle = await start_run(client, f"crash-server-{sig.name.lower()}")
    cleanup.append(handle)
    await wait_until(lambda: agent_calls(model_server, "researcher") == 1, "the researcher's first turn")
    port = dev_server.port
    dev_server.stop(sig)
    await asyncio.sleep(3)  # the held call ends (after 1 s) while no server listens
    dev_server.start()
    restarted_at = datetime.now(UTC)
    assert dev_server.port == port, "the server came back on another port"

    result = await asyncio.wait_for(handle.result(), timeout=RUN_TIMEOUT)

    assert worker.process is not None and worker.process.poll() is None, "the worker died with the server"
    assert_complete(result)
    history = await handle.fetch_history()
    assert retried_activities(history) == {}
    assert_not_rerun(completed_activity_ids(history), history)
    assert len(model_server.requests) == result.usage.llm_calls
    progress = first_progress(history, since=restarted_at)
    assert progress is not None
    seconds = (event_time(progress) - restarted_at).total_seconds()
    print(f"resume after a server restart ({sig.name}): {seconds:.1f} s from the server's return")
    record_property("resume_seconds", round(seconds, 2))
    assert seconds < RESUME_LIMIT.total_seconds()
