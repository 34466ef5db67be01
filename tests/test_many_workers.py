"""Three worker processes, 30 concurrent runs, one worker SIGKILLed under load (issue #12).

Why: Temporal spreads a fleet's work over any number of workers, and a machine can die at any
moment. The histories must show that every worker took part, that every run still completed, and
that the kill cost nothing but retries of what was in flight: each run issues exactly the activities
an undisturbed run issues (no completed activity ran again, none was lost), each completed once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.support.history_checks import activity_events, process_of, wait_for_poller, worker_identity
from tests.support.processes import DevServer, WorkerProcess
from tests.support.runs import QUESTION, run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

RUNS = 30
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED


def activity_counts(events: dict[str, list]) -> Counter[str]:  # type: ignore[type-arg]
    return Counter(run[0].activity_task_scheduled_event_attributes.activity_type.name for run in events.values())


@pytest.mark.timeout(420)
async def test_thirty_runs_on_three_workers_survive_one_killed_under_load(
    dev_server: DevServer, client: Client, tmp_path: Path
) -> None:
    workers = [WorkerProcess(dev_server.address, tmp_path / f"worker-{index}.log",
                             env={"DEERFLOW_OFFLINE_MODEL_LATENCY": "0.3"}).start() for index in range(3)]
    try:
        identities = [worker_identity(worker.process.pid) for worker in workers if worker.process]
        await asyncio.gather(*(wait_for_poller(client, identity) for identity in identities))
        request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=2)
        handles: list[WorkflowHandle] = await asyncio.gather(*(
            client.start_workflow(WORKFLOW_TYPE, request, id=run_id(f"fleet-{index}"), task_queue=TASK_QUEUE,
                                  result_type=ResearchResult) for index in range(RUNS)))
        # Under load: kill one worker once the fleet is well into its runs, with work in flight.
        deadline = time.monotonic() + 120
        while True:
            histories = await asyncio.gather(*(handle.fetch_history() for handle in handles[:5]))
            if sum(event.event_type == COMPLETED for history in histories for event in history.events) >= 10:
                break
            assert time.monotonic() < deadline, "the runs made no progress"
            await asyncio.sleep(0.3)
        workers[1].kill()

        results = await asyncio.wait_for(asyncio.gather(*(handle.result() for handle in handles)), 300)
        assert all(result.report for result in results)
        per_run = [activity_events(await handle.fetch_history()) for handle in handles]
    finally:
        for worker in workers:
            worker.stop()

    for events in per_run:
        for run in events.values():
            assert [event.event_type for event in run].count(COMPLETED) == 1, run
    assert len({frozenset(activity_counts(events).items()) for events in per_run}) == 1, \
        "every run issued the same activities as the others: none lost, none repeated"
    ran_by = Counter(process_of(event.activity_task_started_event_attributes.identity)
                     for events in per_run for run in events.values() for event in run
                     if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    assert set(identities) <= set(ran_by), f"every worker ran activities: {ran_by}"
