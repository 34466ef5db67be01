"""Every decision of ours from the real ``temporal`` CLI and the Web UI, end to end (issue #48 item
1): the dev server, a real worker process, and ``temporal workflow update execute`` / ``signal`` /
``cancel`` with the documented single input, as an operator sends them, and the Web UI's own routes
on the dev server's UI port with the body its update and signal dialogs send (one ``json/plain``
payload: temporalio/ui ``workflow-service.ts``).

Each update takes one JSON value, like its signal: a budget decision object, the plan feedback or
the answer as a string. A malformed one is refused to the CLI with its reason and leaves the run
waiting; none of them fails a workflow task or puts a traceback in the worker's log. A decision
without a sender is recorded as coming from outside our doors.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.processes import (
    DevServer,
    WorkerProcess,
    start_worker,
    starter,
    wait_for_cli_status,
    wait_for_port,
)
from tests.support.runs import QUESTION, run_id
from workflows.contracts.decisions import OUTSIDE
from workflows.contracts.research import REVIEW_PLAN_UPDATE, TASK_QUEUE, WORKFLOW_TYPE

pytestmark = pytest.mark.timeout(240)

SENDER_FROM_OUTSIDE = OUTSIDE.model_dump(mode="json")
# (the --input values of a ``decide_budget`` update, what the CLI's refusal must say)
BAD_BUDGET_DECISIONS = [
    (['{"action": "fly"}'], "action: Input should be 'raise', 'finish' or 'cancel'"),
    (['{"action": "finish", "tokens": 5000}'], "'tokens' or 'cost_usd' (the new budget) goes with 'raise'"),
    (["42"], "a budget decision is"),
    (['{"action": "raise", "tokens": 500}'], "a raise must go above the current budget of 700 tokens"),
    (['{"action": "finish"}', '"bob"'], "the sender must be an object with name and via"),
    ([], "expected one JSON object (and optionally its sender), got 0 inputs"),
]


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client,
                 tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, tmp_path_factory.mktemp("worker") / "worker.log")
    yield process
    process.stop()


def update(dev_server: DevServer, workflow_id: str, name: str, *inputs: str) -> tuple[bool, str]:
    """``temporal workflow update execute`` with ``inputs``: whether it succeeded, and what it said."""
    sent = dev_server.cli("workflow", "update", "execute", "--workflow-id", workflow_id, "--name", name,
                          *(part for value in inputs for part in ("--input", value)), "-o", "json")
    return sent.returncode == 0, sent.stdout + sent.stderr


def signal(dev_server: DevServer, workflow_id: str, name: str, value: str) -> None:
    sent = dev_server.cli("workflow", "signal", "--workflow-id", workflow_id, "--name", name, "--input", value)
    assert sent.returncode == 0, sent.stderr


async def no_task_failures(client: Client, workflow_id: str) -> None:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [event.event_type for event in history.events]


def worker_log_is_clean(worker: WorkerProcess) -> None:
    text = worker.log_path.read_text()
    assert "Traceback" not in text and "AttributeError" not in text and "Failed decoding" not in text, text


def decisions(status: dict) -> list[tuple[str, str, dict]]:
    return [(d["kind"], d["decision"], d["by"]) for d in status["decisions"]]


def paused_at_budget(status: dict) -> bool:
    return status["awaiting"] == "budget"


async def test_a_budget_pause_is_decided_with_the_single_object_update_and_signal(
        dev_server: DevServer, client: Client, worker: WorkerProcess) -> None:
    workflow_id = run_id("budget-temporal-cli")
    started = starter(dev_server, "run", QUESTION, "--no-wait", "--id", workflow_id, "--auto-accept",
                      "--token-budget", "700")
    assert started.returncode == 0, started.stderr
    wait_for_cli_status(dev_server, workflow_id, paused_at_budget, timeout=60)

    for inputs, reason in BAD_BUDGET_DECISIONS:
        taken, said = update(dev_server, workflow_id, "decide_budget", *inputs)
        assert not taken and reason in said, (inputs, said)
    assert paused_at_budget(wait_for_cli_status(dev_server, workflow_id, lambda s: True))

    taken, said = update(dev_server, workflow_id, "decide_budget", '{"action": "raise", "tokens": 900}')
    assert taken and "Budget decision taken: raise to 900 tokens." in said, said
    # 900 tokens are spent already: the run pauses again at once, and the signal decides as the update does.
    wait_for_cli_status(dev_server, workflow_id, lambda s: paused_at_budget(s) and len(s["decisions"]) == 1)
    signal(dev_server, workflow_id, "budget", '{"action": "raise", "tokens": 1000}')
    wait_for_cli_status(dev_server, workflow_id, lambda s: paused_at_budget(s) and len(s["decisions"]) == 2)
    taken, said = update(dev_server, workflow_id, "decide_budget", '{"action": "finish"}')
    assert taken and "Budget decision taken: finish." in said, said

    done = wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=60)
    assert decisions(done) == [("budget", "raise to 900 tokens", SENDER_FROM_OUTSIDE),
                               ("budget", "raise to 1,000 tokens", SENDER_FROM_OUTSIDE),
                               ("budget", "finish", SENDER_FROM_OUTSIDE)]
    assert done["budget"]["cut_short"]
    await no_task_failures(client, workflow_id)
    worker_log_is_clean(worker)


def review_and_clarification(dev_server: DevServer, door: str) -> tuple[str, str]:
    """A run waiting for its plan's review, and one about to ask a clarifying question (auto-accepted)."""
    reviewed, clarified = run_id(f"review-{door}"), run_id(f"answer-{door}")
    assert starter(dev_server, "run", QUESTION, "--no-wait", "--id", reviewed).returncode == 0
    request = {"question": "Tell me about batteries", "enable_clarification": True, "max_clarification_rounds": 1,
               "auto_accept_plan": True}
    started = dev_server.cli("workflow", "start", "--type", WORKFLOW_TYPE, "--task-queue", TASK_QUEUE,
                             "--workflow-id", clarified, "--input", json.dumps(request))
    assert started.returncode == 0, started.stderr
    wait_for_cli_status(dev_server, reviewed, lambda s: s["awaiting"] == "plan_feedback", timeout=60)
    return reviewed, clarified


async def test_a_plan_review_and_a_clarification_answer_are_updates_with_one_string(
        dev_server: DevServer, client: Client, worker: WorkerProcess) -> None:
    reviewed, clarified = review_and_clarification(dev_server, "temporal-cli")
    for inputs, reason in [(["42"], "feedback must be a string, got int"),
                           (['"ship it"'], "feedback must start with [ACCEPTED] or [EDIT_PLAN]"),
                           (['"[ACCEPTED]"', '{"name": "eve"}'], "the sender must be an object with name and via")]:
        taken, said = update(dev_server, reviewed, "review_plan", *inputs)
        assert not taken and reason in said, (inputs, said)
    taken, said = update(dev_server, reviewed, "review_plan", json.dumps("[ACCEPTED]"))
    assert taken and "Plan accepted" in said, said

    wait_for_cli_status(dev_server, clarified, lambda s: s["awaiting"] == "clarification_answer", timeout=60)
    for inputs, reason in [(["7"], "a clarification answer must be a non-empty string"),
                           (['"  "'], "a clarification answer must be a non-empty string")]:
        taken, said = update(dev_server, clarified, "clarification_answer", *inputs)
        assert not taken and reason in said, (inputs, said)
    taken, said = update(dev_server, clarified, "clarification_answer", json.dumps("solid-state cells for cars"))
    assert taken and "Answer received" in said, said

    for workflow_id, kind in ((reviewed, "plan_review"), (clarified, "clarification")):
        done = wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=90)
        assert [(d["kind"], d["by"]) for d in done["decisions"]] == [(kind, SENDER_FROM_OUTSIDE)]
        await no_task_failures(client, workflow_id)
    worker_log_is_clean(worker)


@pytest.mark.parametrize("reason", [None, "deerflow-actor:{not json", 'deerflow-actor:{"name": "", "via": "cli"}'])
async def test_a_cancel_from_the_temporal_cli_is_recorded_as_from_outside_whatever_its_reason(
        dev_server: DevServer, client: Client, worker: WorkerProcess, reason: str | None) -> None:
    workflow_id = run_id("cancel-temporal-cli")
    assert starter(dev_server, "run", QUESTION, "--no-wait", "--id", workflow_id).returncode == 0
    wait_for_cli_status(dev_server, workflow_id, lambda s: s["awaiting"] == "plan_feedback", timeout=60)
    if reason is None:
        sent = dev_server.cli("workflow", "cancel", "--workflow-id", workflow_id)
    else:  # the CLI sends a reason only with a batch cancel
        sent = dev_server.cli("workflow", "cancel", "--query", f"WorkflowId = '{workflow_id}'", "--reason", reason,
                              "--yes")
    assert sent.returncode == 0, sent.stderr
    closed = wait_for_cli_status(dev_server, workflow_id, lambda s: bool(s["decisions"]), timeout=60)
    assert decisions(closed) == [("cancel", "cancel", SENDER_FROM_OUTSIDE)]
    await no_task_failures(client, workflow_id)
    worker_log_is_clean(worker)


def json_payload(value: object) -> dict[str, object]:
    """One payload as the Web UI encodes its input field (``json/plain``, base64 in JSON)."""
    return {"metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
            "data": base64.b64encode(json.dumps(value).encode()).decode()}


class WebUI:
    """The Web UI's own routes on the dev server's UI port, with the CSRF cookie its page sets and
    the bodies its update and signal dialogs send."""

    def __init__(self, http: httpx.Client, workflow_id: str) -> None:
        assert http.get("/").status_code == 200  # the page sets the CSRF cookie its requests echo
        self.http, self.workflow_id = http, workflow_id
        self.routes = f"/api/v1/namespaces/default/workflows/{workflow_id}"
        self.headers = {"X-CSRF-TOKEN": http.cookies["_csrf"]}

    def update(self, name: str, value: object, update_id: str) -> dict:
        """The update's outcome: ``success`` with its answer's payloads, or ``failure``."""
        body = {"workflowExecution": {}, "request": {"meta": {"updateId": update_id},
                                                     "input": {"args": {"payloads": [json_payload(value)]}}}}
        answered = self.http.post(f"{self.routes}/update/{name}", json=body, headers=self.headers)
        assert answered.status_code == 200, answered.text
        outcome: dict = answered.json()["outcome"]
        return outcome

    def signal(self, name: str, value: object) -> None:
        signalled = self.http.post(f"{self.routes}/signal/{name}", headers=self.headers, json={
            "signalName": name, "workflowExecution": {"workflowId": self.workflow_id},
            "input": {"payloads": [json_payload(value)]}})
        assert signalled.status_code == 200, signalled.text


def answer_of(outcome: dict) -> str:
    return base64.b64decode(outcome["success"]["payloads"][0]["data"]).decode()


def web_ui(dev_server: DevServer) -> httpx.Client:
    wait_for_port(dev_server.ui_port)
    return httpx.Client(base_url=f"http://127.0.0.1:{dev_server.ui_port}", timeout=60)


async def test_a_budget_pause_is_decided_from_the_web_ui(dev_server: DevServer, client: Client,
                                                        worker: WorkerProcess) -> None:
    workflow_id = run_id("budget-web-ui")
    assert starter(dev_server, "run", QUESTION, "--no-wait", "--id", workflow_id, "--auto-accept",
                   "--token-budget", "700").returncode == 0
    wait_for_cli_status(dev_server, workflow_id, paused_at_budget, timeout=60)
    with web_ui(dev_server) as http:
        ui = WebUI(http, workflow_id)
        refused = ui.update("decide_budget", {"action": "fly"}, "refused")
        assert "action: Input should be 'raise', 'finish' or 'cancel'" in refused["failure"]["message"], refused
        ui.signal("budget", {"action": "raise", "tokens": 900})
        wait_for_cli_status(dev_server, workflow_id, lambda s: paused_at_budget(s) and len(s["decisions"]) == 1)
        assert "Budget decision taken: finish." in answer_of(ui.update("decide_budget", {"action": "finish"}, "taken"))
    done = wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=60)
    assert decisions(done) == [("budget", "raise to 900 tokens", SENDER_FROM_OUTSIDE),
                               ("budget", "finish", SENDER_FROM_OUTSIDE)]
    await no_task_failures(client, workflow_id)
    worker_log_is_clean(worker)


async def test_a_plan_review_and_a_clarification_answer_are_decided_from_the_web_ui(
        dev_server: DevServer, client: Client, worker: WorkerProcess) -> None:
    """The review as the update (a malformed one refused to the dialog first), the answer as the
    signal: with the CLI's test above, each of the four is taken with one input from some door."""
    reviewed, clarified = review_and_clarification(dev_server, "web-ui")
    wait_for_cli_status(dev_server, clarified, lambda s: s["awaiting"] == "clarification_answer", timeout=60)
    with web_ui(dev_server) as http:
        review = WebUI(http, reviewed)
        refused = review.update(REVIEW_PLAN_UPDATE, "ship it", "refused")
        assert "feedback must start with [ACCEPTED] or [EDIT_PLAN]" in refused["failure"]["message"], refused
        assert "Plan accepted" in answer_of(review.update(REVIEW_PLAN_UPDATE, "[ACCEPTED]", "taken"))
        WebUI(http, clarified).signal("clarification_answer", "solid-state cells for cars")
    for workflow_id, kind in ((reviewed, "plan_review"), (clarified, "clarification")):
        done = wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=90)
        assert [(d["kind"], d["by"]) for d in done["decisions"]] == [(kind, SENDER_FROM_OUTSIDE)]
        await no_task_failures(client, workflow_id)
    worker_log_is_clean(worker)
