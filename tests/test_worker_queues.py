"""The split queues, end to end: ``worker.py --queues main``, ``--queues model,tools`` and ``--queues sandbox``.

Why: operators scale and isolate each kind of work in its own processes, and docker-compose runs
the keys and the sandbox's privileges in two services. A run must complete across three
processes, each activity must run on its kind's queue and process only, and the workflow's
process must not even poll the other queues.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from offline.providers import without_provider_settings
from tests.support.history_checks import activity_events
from tests.support.processes import REPO_DIR, DevServer, free_port
from tests.support.prometheus_text import scrape, total
from tests.support.runs import QUESTION, run_id
from workflows.calls.queues import queue_name
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

PROCESSES = ("main", "model,tools", "sandbox")


@pytest.fixture
def metrics() -> dict[str, str]:
    """Each worker process's /metrics address."""
    return {queues: f"127.0.0.1:{free_port()}" for queues in PROCESSES}


@pytest.fixture
def split_workers(dev_server: DevServer, tmp_path: Path,
                  metrics: dict[str, str]) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started = {}
    for queues in PROCESSES:
        env = {**without_provider_settings(os.environ), "TEMPORAL_ADDRESS": dev_server.address,
               "DEERFLOW_METRICS_ADDRESS": metrics[queues]}
        log = (tmp_path / f"{queues}.log").open("ab")
        started[queues] = subprocess.Popen([sys.executable, str(REPO_DIR / "worker.py"), "--queues", queues],
                                           cwd=REPO_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
    yield started
    for process in started.values():
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


KIND_OF = {"chat": "model", "web_search": "tools", "crawl_tool": "tools", "local_search_tool": "tools",
           "mcp_list_tools": "tools", "mcp_call_tool": "tools", "python_repl_tool": "sandbox",
           "load_run_config": "main"}
PROCESS_OF = {"main": "main", "model": "model,tools", "tools": "model,tools", "sandbox": "sandbox"}


@pytest.mark.timeout(180)
async def test_each_kind_of_work_runs_on_its_own_queue_and_process(
    client: Client, split_workers: dict[str, subprocess.Popen[bytes]], tmp_path: Path, metrics: dict[str, str]
) -> None:
    handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
                                         id=run_id("split"), task_queue=TASK_QUEUE, result_type=ResearchResult)
    result = await handle.result()
    assert result.report
    seen: dict[str, set[str]] = {}
    python_calls = 0
    for scheduled, started, *_ in activity_events(await handle.fetch_history()).values():
        attributes = scheduled.activity_task_scheduled_event_attributes
        kind = KIND_OF[attributes.activity_type.name]
        assert attributes.task_queue.name == queue_name(kind), attributes.activity_type.name
        process = split_workers[PROCESS_OF[kind]]
        assert started.activity_task_started_event_attributes.identity.startswith(f"{process.pid}@")
        seen.setdefault(kind, set()).add(attributes.activity_type.name)
        python_calls += attributes.activity_type.name == "python_repl_tool"
    assert {"model", "tools", "sandbox", "main"} <= set(seen), "the default plan searches, crawls and runs Python"
    assert "python_repl_tool sandbox: isolated" in (tmp_path / "sandbox.log").read_text()
    main_log = (tmp_path / "main.log").read_text()
    assert all(queue_name(kind) not in main_log for kind in ("model", "tools", "sandbox"))
    # Each worker serves its own counters: the model calls on the model one, the Python on the sandbox one.
    model, sandbox = scrape(metrics["model,tools"]), scrape(metrics["sandbox"])
    assert total(model, "deerflow_llm_calls") == result.usage.llm_calls
    assert total(sandbox, "deerflow_sandbox_runs", outcome="ok") == python_calls
    assert total(scrape(metrics["main"]), "deerflow_llm_calls") == total(model, "deerflow_sandbox_runs") == 0
