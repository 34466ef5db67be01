"""End to end: the bundled dev server, real worker processes, the real ``temporal`` CLI and starter.py.

These cover what only shows between processes: the public contract as a user scripts it, crash
recovery after ``kill -9``, and the front door's error messages.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from config.settings import load_settings
from runtime.build_info import build_id, code_digest
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from storage.subtrees import ENCODING as SUBTREES
from tests.support.history_checks import activity_events
from tests.support.processes import (
    DevServer,
    WorkerProcess,
    run_starter,
    start_worker,
    starter,
    wait_for_cli_status,
)
from tests.support.runs import OFFLINE_REPORT, QUESTION, run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.status import Phase, RunStatus, StepState


@pytest.fixture
async def worker(dev_server: DevServer, client: Client, tmp_path: Path) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, tmp_path / "worker.log")
    yield process
    process.stop()


def test_public_contract_with_the_temporal_cli(dev_server: DevServer, worker: WorkerProcess) -> None:
    workflow_id = run_id("cli")
    started = dev_server.cli("workflow", "start", "--type", WORKFLOW_TYPE, "--task-queue", TASK_QUEUE,
                             "--workflow-id", workflow_id, "--input", json.dumps({"question": QUESTION}))
    assert started.returncode == 0, started.stderr

    paused = wait_for_cli_status(dev_server, workflow_id, lambda s: s["awaiting"] == "plan_feedback")
    assert paused["phase"] == "awaiting_review"
    assert len(paused["plan"]["steps"]) == 3

    edit = dev_server.cli("workflow", "signal", "--workflow-id", workflow_id, "--name", "plan_feedback",
                          "--input", json.dumps("[EDIT_PLAN] cover charging infrastructure"))
    assert edit.returncode == 0, edit.stderr
    revised = wait_for_cli_status(dev_server, workflow_id,
                                  lambda s: s["awaiting"] == "plan_feedback" and len(s["plan_history"]) == 2)
    assert "charging infrastructure" in json.dumps(revised["plan"]).lower()

    accept = dev_server.cli("workflow", "signal", "--workflow-id", workflow_id, "--name", "plan_feedback",
                            "--input", json.dumps("[ACCEPTED]"))
    assert accept.returncode == 0, accept.stderr
    result = dev_server.cli("workflow", "result", "--workflow-id", workflow_id, "-o", "json", timeout=60)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)["result"]
    assert outcome["outcome"] == "report"
    assert outcome["plan"]["title"] == revised["plan"]["title"]
    assert all(step["execution_res"] for step in outcome["plan"]["steps"])
    # The temporal CLI names no sender: both reviews are recorded as coming from outside our doors.
    assert [decision["by"]["via"] for decision in outcome["decisions"]] == ["temporal", "temporal"]
    # The build ID the worker gives (history records it with each workflow task) is ours: the SDK, left
    # to derive one, hashes the bytecode of every module the worker loaded at its start.
    shown = dev_server.cli("workflow", "show", "--workflow-id", workflow_id, "-o", "json")
    builds = {event["workflowTaskCompletedEventAttributes"]["workerVersion"]["buildId"]
              for event in json.loads(shown.stdout)["events"] if "workflowTaskCompletedEventAttributes" in event}
    assert builds == {build_id(code_digest())}


async def test_kill_9_during_a_researcher_step_then_a_new_worker_completes_the_run(
    dev_server: DevServer, client: Client, tmp_path: Path
) -> None:
    # A slow model (1 s a call) makes the kill land inside the researcher's model call.
    slow = {"DEERFLOW_OFFLINE_MODEL_LATENCY": "1.0"}
    first = await start_worker(dev_server, client, tmp_path / "first.log", **slow)
    handle = await client.start_workflow(
        WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True), id=run_id("crash"),
        task_queue=TASK_QUEUE, result_type=ResearchResult,
    )
    deadline = time.monotonic() + 60
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if status.phase is Phase.RESEARCHING and status.steps and status.steps[0].state is StepState.RUNNING:
            break
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # inside the researcher's first model call
    first.kill()
    before = activity_events(await handle.fetch_history())
    completed_before = {aid for aid, evs in before.items()
                        if any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED for e in evs)}
    assert len(completed_before) >= 4  # run config, coordinator, search, planner at least

    # The replacement's model is quick: what is left of the run need not wait a second a call.
    second = await start_worker(dev_server, client, tmp_path / "second.log", DEERFLOW_OFFLINE_MODEL_LATENCY="0.1")
    restarted_at = time.monotonic()
    try:
        result = await asyncio.wait_for(handle.result(), timeout=120)
    finally:
        second.stop()
    assert result.plan is not None and all(step.execution_res for step in result.plan.steps)

    after = activity_events(await handle.fetch_history())
    for activity_id in completed_before:
        kinds = [event.event_type for event in after[activity_id]]
        assert kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) == 1
        started = [e for e in after[activity_id] if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
        assert [e.activity_task_started_event_attributes.attempt for e in started] == [1], activity_id
    # The call that was in flight on the killed worker ran again (attempt 2) on the new one.
    retried = [aid for aid, evs in after.items() for e in evs
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
               and e.activity_task_started_event_attributes.attempt > 1]
    assert len(retried) == 1, retried
    assert time.monotonic() - restarted_at < 90


def test_starter_runs_reviews_reports_and_replays(dev_server: DevServer, worker: WorkerProcess,
                                                  tmp_path: Path) -> None:
    workflow_id = run_id("starter")
    started = starter(dev_server, "run", QUESTION, "--no-wait", "--id", workflow_id, "--report-style", "news")
    assert started.returncode == 0, started.stderr
    wait_for_cli_status(dev_server, workflow_id, lambda s: s["awaiting"] == "plan_feedback")

    status = starter(dev_server, "status", workflow_id)
    assert "awaiting_review" in status.stdout and "Awaiting: plan_feedback" in status.stdout

    accepted = starter(dev_server, "review", workflow_id, "--accept", "--as", "carol")
    assert accepted.returncode == 0, accepted.stderr
    assert "accepted" in accepted.stdout.lower()
    assert "plan review: [ACCEPTED] by carol (cli)" in starter(dev_server, "status", workflow_id).stdout
    again = starter(dev_server, "review", workflow_id, "--accept")
    assert again.returncode == 2 and "not waiting for" in again.stderr, again.stderr

    wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=60)
    report_file = tmp_path / "report.md"
    report = starter(dev_server, "report", workflow_id, "-o", str(report_file))
    assert report.returncode == 0, report.stderr
    assert report_file.read_text().startswith(OFFLINE_REPORT)
    assert "## What We Know" in report_file.read_text()  # the news style's structure

    replayed = starter(dev_server, "replay", workflow_id)
    assert replayed.returncode == 0 and "Replay OK" in replayed.stdout, replayed.stdout + replayed.stderr
    exported = tmp_path / "history.json"
    assert starter(dev_server, "history", workflow_id, "-o", str(exported)).returncode == 0
    # The file is self-contained: it replays where there is no blob store at all (another machine).
    assert base64.b64encode(SUBTREES).decode() not in exported.read_text()  # metadata is base64 in JSON
    elsewhere = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(tmp_path / "elsewhere")}
    from_file = run_starter(elsewhere, "replay", "--file", str(exported))
    assert from_file.returncode == 0 and "Replay OK" in from_file.stdout, from_file.stdout + from_file.stderr
    # The server's form names blobs that are not there: one clear error, not a false non-determinism.
    raw = tmp_path / "raw.json"
    assert starter(dev_server, "history", workflow_id, "--raw", "-o", str(raw)).returncode == 0
    unreadable = run_starter(elsewhere, "replay", "--file", str(raw))
    assert unreadable.returncode == 2 and "Cannot read the payloads" in unreadable.stderr, unreadable.stderr
    assert "Nondeterminism" not in unreadable.stdout + unreadable.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "no-such-run"], "No research run with ID 'no-such-run'"),
        (["review", "no-such-run", "--accept"], "No research run with ID 'no-such-run'"),
        (["report", "no-such-run"], "No research run with ID 'no-such-run'"),
        (["run", "q", "--max-steps", "0"], "must be at least 1"),
        (["run", "q", "--report-style", "poetry"], "invalid choice"),
        (["review", "x"], "one of the arguments --accept --edit is required"),
        (["replay", "--file", "/nonexistent.json"], "Cannot read history file"),
    ],
)
def test_starter_bad_input_gets_a_clear_error(dev_server: DevServer, args: list[str], message: str) -> None:
    """No worker: each is refused by the CLI or the server before a worker could take part."""
    result = starter(dev_server, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


async def test_a_paused_run_survives_restarting_both_worker_and_server(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "paused.db").start()
    worker: WorkerProcess | None = None
    try:
        client = await connect_when_ready(server.address, data_converter=data_converter(load_settings()))
        worker = await start_worker(server, client, tmp_path / "worker-1.log")
        handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("paused"),
                                             task_queue=TASK_QUEUE, result_type=ResearchResult)
        deadline = time.monotonic() + 60
        while (status := await handle.query("status", result_type=RunStatus)).awaiting != "plan_feedback":
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.2)
        plan_before = status.plan

        worker.kill()  # kill -9 the worker, then stop and restart the server on the same db file and port
        server.stop()
        server.start()
        client = await connect_when_ready(server.address, data_converter=data_converter(load_settings()))
        worker = await start_worker(server, client, tmp_path / "worker-2.log")
        handle = client.get_workflow_handle(handle.id, result_type=ResearchResult)
        resumed = await handle.query("status", result_type=RunStatus)
        assert resumed.awaiting == "plan_feedback" and resumed.plan == plan_before

        await handle.signal("plan_feedback", "[ACCEPTED]")
        result = await asyncio.wait_for(handle.result(), timeout=90)
        assert result.plan is not None and all(step.execution_res for step in result.plan.steps)
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
