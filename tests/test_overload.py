"""A worker at low priority on a busy machine, SIGKILLed mid-load, loses no run (issue #19, small).

``RUNS`` auto-accepted runs on the dev server and one real ``worker.py`` whose niceness is
``WORKER_NICENESS`` above this process's (19 under ``nice -n 15``), beside two busy loops per core
at this process's priority for at most ``LOOP_SECONDS``. Once the model has answered a third of
the runs' calls, the worker's process group is SIGKILLed and a new worker (as nice) takes over.
Every run must complete with its report, none may fail, and each must have done its work exactly
once: one result per activity and per model turn, and one reporter turn.

Bounded for the suite: the loops end by themselves after ``LOOP_SECONDS`` and are killed when the
runs end, and the starvation is mild (the worker keeps roughly a fifth of a core), so this holds
with any retry policy that absorbs a crash. The full measurement, 40 runs through the API server
with the worker at nice 19 under four minutes of busy loops, is ``bench/overload.py``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from config.settings import load_settings
from offline.model_server import FakeModelServer
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from tests.support.crash_drill import wait_until
from tests.support.history_checks import (
    COMPLETED,
    activity_events,
    completed_once_problems,
    process_of,
    wait_for_poller,
    worker_identity,
)
from tests.support.processes import BusyLoops, DevServer, WorkerProcess
from tests.support.runs import QUESTION, run_id
from workflows.calls.errors import failure_message
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult

pytestmark = pytest.mark.timeout(240)

RUNS = 6
MODEL_CALLS_PER_RUN = 9  # the offline model's default run (coordinator, planner, 6 agent turns, reporter)
LOOP_SECONDS = 12.0
WORKER_NICENESS = 4  # 2.4x less CPU weight than the loops, whatever this process's own niceness
RUN_TIMEOUT = 150.0


def completers(events: list[HistoryEvent]) -> set[str]:
    """The identities of the workers that completed these activity events."""
    return {process_of(event.activity_task_completed_event_attributes.identity) for event in events
            if event.event_type == COMPLETED}


async def test_starved_worker_killed_mid_load_loses_no_run(dev_server: DevServer, tmp_path: Path) -> None:
    home = tmp_path / "home"  # the workers' in-flight journals and blobs, read by this client too
    client: Client = await connect_when_ready(
        dev_server.address, data_converter=data_converter(load_settings({**os.environ, "DEERFLOW_HOME": str(home)})))
    model = FakeModelServer(latency_seconds=0.05).start()
    search = FakeSearchServer().start()
    env = {**offline_env(model, search), "DEERFLOW_HOME": str(home)}
    workers = [WorkerProcess(dev_server.address, tmp_path / "first.log", env=env, niceness=WORKER_NICENESS).start()]
    try:
        assert workers[0].process is not None
        first = worker_identity(workers[0].process.pid)
        await wait_for_poller(client, first)
        with BusyLoops(2 * (os.cpu_count() or 1), LOOP_SECONDS):
            handles: list[WorkflowHandle] = [
                await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
                                            id=run_id("overload"), task_queue=TASK_QUEUE, result_type=ResearchResult)
                for _ in range(RUNS)]
            ended = asyncio.ensure_future(
                asyncio.gather(*(handle.result() for handle in handles), return_exceptions=True))
            await wait_until(lambda: len(model.requests) >= RUNS * MODEL_CALLS_PER_RUN // 3 or ended.done(),
                             "a third of the model calls", timeout=RUN_TIMEOUT)
            workers[0].kill()
            workers.append(WorkerProcess(dev_server.address, tmp_path / "second.log", env=env,
                                         niceness=WORKER_NICENESS).start())
            results = await asyncio.wait_for(ended, RUN_TIMEOUT)
        failed = [f"{handle.id}: {failure_message(getattr(result, 'cause', None) or result)}"
                  for handle, result in zip(handles, results, strict=True) if not isinstance(result, ResearchResult)]
        assert not failed, f"runs failed: {failed}"
        assert all(result.outcome is Outcome.REPORT and result.report.strip() for result in results)
        histories = [await handle.fetch_history() for handle in handles]
        problems = [f"{handle.id}: {problem}" for handle, history in zip(handles, histories, strict=True)
                    for problem in await completed_once_problems(history, client.data_converter)]
        assert not problems
        # The kill landed mid-run: some run has work completed by both workers.
        assert workers[1].process is not None
        second = worker_identity(workers[1].process.pid)
        assert any({first, second} <= set().union(*map(completers, activity_events(history).values()))
                   for history in histories), "no run was in progress at the kill"
    finally:
        for worker in workers:
            worker.kill()
        model.stop()
        search.stop()
