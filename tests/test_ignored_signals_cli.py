"""Bad feedback sent with the real ``temporal workflow signal`` (issue #13 item 5), end to end.

The CLI can only say that the signal was delivered; the run's answer is an "ignored" event in its
status, which ``starter.py status`` shows. The worker logs one warning per signal, no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.processes import DevServer, start_worker, starter, wait_for_cli_status
from tests.support.runs import QUESTION, run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE

# (the --input value, what `starter.py status` must then say)
BAD_FEEDBACK = [
    ("42", "ignored signal plan_feedback: feedback must be a string, got int"),
    ('"nonsense"', "ignored signal plan_feedback: feedback must start with [ACCEPTED] or [EDIT_PLAN]"),
]


async def test_bad_feedback_from_the_temporal_cli_shows_in_status_and_the_run_goes_on(
    dev_server: DevServer, client: Client, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = await start_worker(dev_server, client, log)
    try:
        workflow_id = run_id("bad-signal")
        started = dev_server.cli("workflow", "start", "--type", WORKFLOW_TYPE, "--task-queue", TASK_QUEUE,
                                 "--workflow-id", workflow_id, "--input", json.dumps({"question": QUESTION}))
        assert started.returncode == 0, started.stderr
        wait_for_cli_status(dev_server, workflow_id, lambda s: s["awaiting"] == "plan_feedback")

        for number, (value, shown) in enumerate(BAD_FEEDBACK, start=1):
            sent = dev_server.cli("workflow", "signal", "--workflow-id", workflow_id, "--name", "plan_feedback",
                                  "--input", value)
            assert sent.returncode == 0, sent.stderr
            wait_for_cli_status(dev_server, workflow_id,
                                lambda s, n=number: sum(e["kind"] == "ignored" for e in s["events"]) == n)
            status = starter(dev_server, "status", workflow_id)
            assert status.returncode == 0, status.stderr
            assert shown in status.stdout, status.stdout
            assert "Awaiting: plan_feedback" in status.stdout, "the run still waits for a review"

        accepted = dev_server.cli("workflow", "signal", "--workflow-id", workflow_id, "--name", "plan_feedback",
                                  "--input", json.dumps("[ACCEPTED]"))
        assert accepted.returncode == 0, accepted.stderr
        wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=60)
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [event.event_type for event in history.events]
    finally:
        worker.stop()
    text = log.read_text()
    assert "Traceback" not in text and "Failed deserializing" not in text, text
    assert text.count("Ignored plan_feedback") == len(BAD_FEEDBACK), text
