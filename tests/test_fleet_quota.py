"""Two worker processes share one model quota, and ``starter.py costs`` and ``list`` read what the runs spent.

Why end to end: the request cap is the server's (the model queue's rate limit, set by every poller),
so only real workers on a real server show that two of them together keep to R, not 2R; and the
spend must read the same from the runs' results through the CLI as from the workers' metrics.
The fake model runs here and stamps each request's arrival (tests/support/quota_drill.py).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from cli.spend import usd
from offline.model_server import FakeModelServer
from offline.providers import model_env
from runtime.embedded import free_port
from tests.support.history_checks import process_of, wait_for_poller, worker_identity
from tests.support.processes import DevServer, WorkerProcess, starter
from tests.support.prometheus_text import scrape, total
from tests.support.quota_drill import DRILL, measured_rate, run_many
from workflows.models import ResearchResult

RATE = 2.0  # requests per second for the whole fleet; uncapped, these runs send several times as many
RUNS = 6
PRICES = {"deerflow-offline-demo": {"input": 100.0, "output": 400.0}}  # dear, so each run costs whole cents
pytestmark = pytest.mark.timeout(300)


@dataclass
class Fleet:
    model: FakeModelServer
    workers: list[WorkerProcess]
    metrics: list[str]


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModelServer]:
    with FakeModelServer(latency_seconds=0.1) as server:
        yield server


@pytest.fixture(scope="module")
async def fleet(dev_server: DevServer, client: Client, model: FakeModelServer,
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
    logs = tmp_path_factory.mktemp("fleet")
    metrics = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    env = {**model_env(model), "LLM_REQUESTS_PER_SECOND": str(RATE), "DEERFLOW_MODEL_PRICES": json.dumps(PRICES)}
    workers = [WorkerProcess(dev_server.address, logs / f"worker-{index}.log",
                             env={**env, "DEERFLOW_METRICS_ADDRESS": address}).start()
               for index, address in enumerate(metrics)]
    try:
        await asyncio.gather(*(wait_for_poller(client, worker_identity(worker.process.pid))
                               for worker in workers if worker.process))
        yield Fleet(model, workers, metrics)
    finally:
        for worker in workers:
            worker.stop()


def chat_workers(events: list) -> set[str]:  # type: ignore[type-arg]
    """The worker processes that started the run's model calls."""
    scheduled = {event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
                 for event in events if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    return {process_of(event.activity_task_started_event_attributes.identity) for event in events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and scheduled[event.activity_task_started_event_attributes.scheduled_event_id] == "chat"}


async def test_two_workers_together_keep_to_the_fleets_request_rate(client: Client, fleet: Fleet) -> None:
    fleet.model.arrivals.clear()
    results = await asyncio.wait_for(run_many(client, RUNS, "fleet-quota"), 240)
    assert all(result.report for result in results), "every run completes under the cap"
    rate = measured_rate(fleet.model.arrivals)
    # Each worker capped on its own would let through 2R; uncapped, these runs send several times R.
    # Below R is no breach: with only a few runs' calls waiting the fleet runs somewhat under R (1.66
    # of 2 here); bench/quota.py's 16 runs keep it saturated, within 10 % of R. Above: six runs' first
    # calls arrive together and the server's limiter lets a second's burst through, which in a 9 s
    # window read 1.32 R in a full suite run (2026-11-28): this test tells the fleet's cap from two
    # workers' own (2R); the bench measures how close to R it keeps.
    assert rate.window_requests >= 10
    assert RATE * 0.5 <= rate.per_second <= RATE * 1.5, rate
    started = set()
    async for execution in client.list_workflows("WorkflowId STARTS_WITH 'fleet-quota'"):
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        started |= chat_workers(list(history.events))
    assert started == {worker_identity(worker.process.pid) for worker in fleet.workers if worker.process}, \
        "both workers served model calls"


async def results_of(client: Client) -> list[ResearchResult]:
    return [await client.get_workflow_handle(execution.id, run_id=execution.run_id,
                                             result_type=ResearchResult).result()
            async for execution in client.list_workflows("ExecutionStatus = 'Completed'")]


def row(output: str, name: str) -> list[str]:
    """The cells of the table row that starts with ``name`` (two or more spaces between cells)."""
    line = next(line for line in output.splitlines() if line.startswith(name + "  "))
    return re.split(r"\s{2,}", line.strip())


async def test_costs_and_list_show_what_the_runs_recorded_and_the_metrics_counted(
    dev_server: DevServer, client: Client, fleet: Fleet, tmp_path: Path
) -> None:
    ran = await asyncio.to_thread(starter, dev_server, "run", "How do tides work?", "--auto-accept",
                                  "--max-steps", "1", "--as", "carol", "-o", str(tmp_path / "report.md"))
    assert ran.returncode == 0, ran.stderr
    results = await results_of(client)
    spent = round(sum(result.usage.cost_usd for result in results), 6)
    calls = sum(result.usage.llm_calls for result in results)
    assert spent > 0 and all(set(result.usage.by_model) == {"deerflow-offline-demo"} for result in results)
    counted = sum(total(scrape(address), "deerflow_llm_cost_microusd", model="deerflow-offline-demo", priced="true")
                  for address in fleet.metrics)
    # The metric counts each call's cost in whole millionths: at most half of one off per call.
    assert abs(counted - spent * 1_000_000) <= calls / 2, "the results and the metrics price the calls alike"

    costs = await asyncio.to_thread(starter, dev_server, "costs", "--since", "1h")
    assert costs.returncode == 0, costs.stderr
    dollars = usd(spent)
    assert f"{len(results)} runs · " in costs.stdout and f"{dollars} estimated" in costs.stdout, costs.stdout
    model = row(costs.stdout, "deerflow-offline-demo")
    assert model[1] == str(len(results)) and model[-1] == dollars
    drill = row(costs.stdout, str(DRILL))
    carol = row(costs.stdout, "carol (cli)")
    assert (drill[1], carol[1]) == (str(RUNS), "1")

    listing = await asyncio.to_thread(starter, dev_server, "list")
    assert listing.returncode == 0, listing.stderr
    assert "SPENT" in listing.stdout.splitlines()[0]
    for result_row in [line for line in listing.stdout.splitlines() if line.startswith("fleet-quota-")]:
        assert re.search(r"[\d,]+ tokens · \$\d+\.\d{4}", result_row), result_row
