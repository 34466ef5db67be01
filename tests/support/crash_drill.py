"""Killing the worker mid-run and recovering on a new one: what the crash tests and the crash-cost bench share.

Why: both measure what a ``kill -9`` costs, so both must start, kill and replace ``worker.py``
the same way, pointed at fakes in *this* process so that every request it sends (the lost one
included) is counted here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from config.settings import load_settings
from hosting.inflight_journal import SUFFIX, read_journal
from hosting.reclaim import journal_directory
from offline.model_server import FakeModelServer
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from tests.support.history_checks import (
    COMPLETED,
    activity_events,
    activity_types,
    completed_activity_ids,
    event_time,
    first_progress,
    wait_for_poller,
    worker_identity,
)
from tests.support.lost_attempt import LostAttempt, watch_lost_attempt
from tests.support.processes import WorkerProcess
from workflows.contracts.research import ResearchResult

RUN_TIMEOUT = 120.0  # a run on the offline fakes finishes well within this, kill included


class WorkerSlot:
    """The one live worker process of a drill, replaced by each crash and handed on.

    Starting ``worker.py`` costs 10-20 s here (imports), so each crash test takes over the worker
    the previous one started as its replacement rather than starting one of its own.
    """

    def __init__(self, address: str, client: Client, model: FakeModelServer, search: FakeSearchServer,
                 log_dir: Path, env: dict[str, str] | None = None) -> None:
        """``env`` adds to the fakes' settings for every worker the slot starts."""
        self.address = address
        self.client = client
        self.model = model
        self.search = search
        self.env = {**offline_env(model, search), **(env or {})}
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


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``predicate`` (a count at a fake, say) until it holds; ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


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
    killed_at: datetime
    launched_at: datetime  # the new worker's launch
    poll_at: datetime  # the new worker polled
    lost: LostAttempt | None  # how the call in flight was given up and retried, if one was


def journalled_tokens(pid: int) -> list[bytes]:
    """The task tokens worker process ``pid`` journalled as in flight (hosting/inflight_journal.py)."""
    journals = [contents for contents in map(read_journal, journal_directory(load_settings()).glob(f"*{SUFFIX}"))
                if contents is not None and contents.stamp.pid == pid]
    return [token for contents in journals for token in contents.tokens]


async def keep_alive(client: Client, tokens: list[bytes], polled: asyncio.Event) -> None:
    """Heartbeat a dead worker's attempts until each is failed (NotFound), or 10 s after the new worker polls.

    Stands in for a replacement that starts within the heartbeat timeout (4 s), which a loaded CI
    machine cannot promise: so a test can show the replacement's reclaim, not the timeout, ending them.
    """
    deadline: float | None = None
    while tokens:
        if deadline is None and polled.is_set():
            deadline = time.monotonic() + 10.0
        if deadline is not None and time.monotonic() > deadline:
            return
        beating = []
        for token in tokens:
            try:
                await client.get_async_activity_handle(task_token=token).heartbeat()
                beating.append(token)
            except RPCError as error:
                if error.status != RPCStatusCode.NOT_FOUND:
                    raise
        tokens = beating
        await asyncio.sleep(0.5)


async def kill_and_recover(handle: WorkflowHandle, workers: WorkerSlot, before_signal: bool = False,
                           hold_lost_attempts: bool = False) -> Recovery:
    """SIGKILL the worker, start a new one at once, and wait for the run to finish on it.

    Delays injected to hold a call open are dropped once the worker is dead, so the retry (or a
    call the dead worker never got to send) is not held too. ``before_signal``: the run is paused
    for review; once the new worker polls, accept the plan. ``hold_lost_attempts``: keep the dead
    worker's attempts from timing out until the new worker has had its chance to reclaim them.
    """
    pid = workers.current.process.pid if workers.current and workers.current.process else 0
    workers.kill()
    killed_at = datetime.now(UTC)
    watcher = asyncio.create_task(watch_lost_attempt(handle))
    polled = asyncio.Event()
    keeper = asyncio.create_task(keep_alive(workers.client, journalled_tokens(pid) if hold_lost_attempts else [],
                                            polled))
    try:
        searches_before = len(workers.search.requests)
        workers.model.clear_faults()
        workers.search.clear_faults()
        before = await handle.fetch_history()
        workers.launch()
        started_at, identity = workers.started_at, workers.identity
        await wait_for_poller(workers.client, identity)
        polled.set()
        poll_at = datetime.now(UTC)
        startup = (poll_at - started_at).total_seconds()
        if before_signal:
            await handle.signal("plan_feedback", "[ACCEPTED]")
        result = await asyncio.wait_for(handle.result(), timeout=RUN_TIMEOUT)
    finally:
        watcher.cancel()
        keeper.cancel()
    history = await handle.fetch_history()
    lost = watcher.result() if watcher.done() and not watcher.cancelled() else None
    progress = first_progress(history, since=started_at, identity=identity)
    assert progress is not None, "the new worker completed nothing"
    return Recovery(result, history, completed_activity_ids(before), in_flight(before),
                    resume_seconds=(event_time(progress) - started_at).total_seconds(), startup_seconds=startup,
                    killed_seconds=(event_time(progress) - killed_at).total_seconds(), searches_before=searches_before,
                    killed_at=killed_at, launched_at=started_at, poll_at=poll_at,
                    lost=lost.with_history(history) if lost else None)
