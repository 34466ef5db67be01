"""The deployment's split, end to end: ``worker.py --queues main`` and ``--queues sandbox``.

Why: docker-compose runs the keys and the sandbox's privileges in two services. A run must
complete with both, and its Python must run on the sandbox worker only; the main worker must
not even poll the sandbox queue.
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
from tests.history_checks import activity_events
from tests.processes import REPO_DIR, DevServer, free_port
from tests.prometheus_text import scrape, total
from tests.support import QUESTION, run_id
from workflows.models import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.queues import SANDBOX_TASK_QUEUE

METRICS = {queues: f"127.0.0.1:{free_port()}" for queues in ("main", "sandbox")}  # each worker's /metrics


@pytest.fixture
def split_workers(dev_server: DevServer, tmp_path: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started = {}
    for queues in ("main", "sandbox"):
        env = {**without_provider_settings(os.environ), "TEMPORAL_ADDRESS": dev_server.address,
               "DEERFLOW_METRICS_ADDRESS": METRICS[queues]}
        log = (tmp_path / f"{queues}.log").open("ab")
        started[queues] = subprocess.Popen([sys.executable, str(REPO_DIR / "worker.py"), "--queues", queues],
                                           cwd=REPO_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
    yield started
    for process in started.values():
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.timeout(180)
async def test_python_runs_on_the_sandbox_worker_only(client: Client, split_workers: dict[str, subprocess.Popen[bytes]],
                                                      tmp_path: Path) -> None:
    handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
                                         id=run_id("split"), task_queue=TASK_QUEUE, result_type=ResearchResult)
    result = await handle.result()
    assert result.report
    python_calls = [events for events in activity_events(await handle.fetch_history()).values()
                    if events[0].activity_task_scheduled_event_attributes.activity_type.name == "python_repl_tool"]
    assert python_calls, "the default plan has a processing step that runs Python"
    sandbox_identity = f"{split_workers['sandbox'].pid}@"
    for scheduled, started, *_ in python_calls:
        assert scheduled.activity_task_scheduled_event_attributes.task_queue.name == SANDBOX_TASK_QUEUE
        assert started.activity_task_started_event_attributes.identity.startswith(sandbox_identity)
    assert "python_repl_tool sandbox: isolated" in (tmp_path / "sandbox.log").read_text()
    assert "deep-research-sandbox" not in (tmp_path / "main.log").read_text()
    # Each worker serves its own counters: the model calls on the main one, the Python on the sandbox one.
    main, sandbox = scrape(METRICS["main"]), scrape(METRICS["sandbox"])
    assert total(main, "deerflow_llm_calls") == result.usage.llm_calls
    assert total(sandbox, "deerflow_sandbox_runs", outcome="ok") == len(python_calls)
    assert total(main, "deerflow_sandbox_runs") == 0
