"""Bad start inputs through the real ``temporal`` CLI and a dev server (issue #8, item 5).

One dev server and one worker, many starts: each listed input must end its run as Failed at once,
with the field named where ``temporal workflow describe`` and ``result`` show it, and in our CLI.
"""

from __future__ import annotations

import asyncio
import json
import time

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from config.settings import Settings
from hosting.registry import build_workers, running
from tests.support.processes import DevServer, starter
from tests.support.runs import run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE

DEEP = "[" * 3000 + "]" * 3000
# (the --input values, text the failure message must contain)
BAD_STARTS: list[tuple[list[str], str]] = [
    (['{"question": 123}'], "question: Input should be a valid string"),
    (["{}"], "question: Field required"),
    (["[]"], "input: Input should be an object"),
    (['"What is rain?"'], "input: Input should be an object"),
    (['{"question": "q", "report_style": "poetry"}'], "report_style: Input should be"),
    (['{"question": "q", "max_step_num": 0}'], "max_step_num: Input should be greater than or equal to 1"),
    (['{"question": "q", "max_step_num": -1}'], "max_step_num: Input should be greater than or equal to 1"),
    (['{"question": "q", "max_step_num": 10000}'], "max_step_num: Input should be less than or equal to 20"),
    (['{"question": "q", "review_timeout": "soon"}'], "review_timeout: "),
    (['{"question": "q"}', '{"question": "r"}'], "expected one input"),
    ([], "expected one input"),
    ([DEEP], "recursion limit exceeded"),
    (['{"question": "q", "checkpoint": {}}'], "'checkpoint' cannot be set by a client"),
]


def describe(dev_server: DevServer, workflow_id: str) -> dict:
    described = dev_server.cli("workflow", "describe", "--workflow-id", workflow_id, "-o", "json")
    assert described.returncode == 0, described.stderr
    return json.loads(described.stdout)


def wait_until_closed(dev_server: DevServer, workflow_id: str, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        info = describe(dev_server, workflow_id)
        if info["workflowExecutionInfo"].get("closeTime"):
            return info
        assert time.monotonic() < deadline, f"{workflow_id} still open: {info}"
        time.sleep(0.2)


async def test_each_bad_start_input_fails_at_once_with_the_field_named(
    dev_server: DevServer, client: Client, worker_settings: Settings
) -> None:
    async with running(build_workers(client, worker_settings)):
        for inputs, expected in BAD_STARTS:
            workflow_id = run_id("bad-input")
            started = await asyncio.to_thread(
                dev_server.cli, "workflow", "start", "--type", WORKFLOW_TYPE, "--task-queue", TASK_QUEUE,
                "--workflow-id", workflow_id, *[arg for value in inputs for arg in ("--input", value)])
            assert started.returncode == 0, started.stderr

            info = await asyncio.to_thread(wait_until_closed, dev_server, workflow_id)
            assert info["workflowExecutionInfo"]["status"] == "WORKFLOW_EXECUTION_STATUS_FAILED", info
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [event.event_type for event in history.events]
            result = await asyncio.to_thread(dev_server.cli, "workflow", "result", "--workflow-id", workflow_id)
            assert expected in result.stdout + result.stderr, (inputs[:1], result.stdout, result.stderr)

        # Our CLI: status (the status query still answers on the failed run) and report (the result).
        status = await asyncio.to_thread(starter, dev_server, "status", workflow_id, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["phase"] == "failed", status.stderr
        assert "'checkpoint' cannot be set by a client" in json.loads(status.stdout)["error"]
        report = await asyncio.to_thread(starter, dev_server, "report", workflow_id)
        assert report.returncode != 0
        assert "'checkpoint' cannot be set by a client" in report.stderr, report.stderr
