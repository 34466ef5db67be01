"""Budgets through the API server, end to end (issue #48): the dev server, a real worker process,
``starter.py serve``, and the run's status read with the real ``temporal`` CLI.

The worker prices the offline model at 100 USD per million tokens each way (a cent per hundred
tokens), so a whole run (some 17,000 tokens) costs about $1.70, and its operator caps every run at
60,000 tokens and $1.50. Runs end by themselves: ``review_timeout`` 10 s and the budget's default
timeout action, finish.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from runtime.converter import data_converter
from tests.support.history_checks import model_turns
from tests.support.processes import (
    DevServer,
    ServeProcess,
    WorkerProcess,
    free_port,
    start_worker,
    starter,
    wait_for_cli_status,
)
from tests.support.runs import QUESTION, run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE

pytestmark = pytest.mark.timeout(240)

PRICES = json.dumps({"deerflow-offline-demo": {"input": 100, "output": 100}})
TOKEN_MAX, COST_MAX = 60_000, 1.5


@dataclass
class Api:
    url: str
    dev_server: DevServer

    def post(self, path: str, body: Any) -> httpx.Response:
        content = body if isinstance(body, str) else json.dumps(body)
        return httpx.post(f"{self.url}{path}", content=content, headers={"content-type": "application/json"},
                          timeout=60)

    def start(self, **fields: Any) -> str:
        started = self.post("/api/runs", {"question": QUESTION, **fields})
        assert started.status_code == 200, started.text
        return started.json()["id"]

    def status(self, run: str, predicate: Any, timeout: float = 90) -> dict:
        """The run's status through the ``temporal`` CLI, once ``predicate`` holds of it."""
        return wait_for_cli_status(self.dev_server, run, predicate, timeout=timeout)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("budget-api")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, folder: Path) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, folder / "worker.log", DEERFLOW_HOME=str(folder / "home"),
                                 DEERFLOW_MODEL_PRICES=PRICES, DEERFLOW_RUN_TOKEN_BUDGET_MAX=str(TOKEN_MAX),
                                 DEERFLOW_RUN_COST_BUDGET_USD_MAX=str(COST_MAX))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def api(dev_server: DevServer, worker: WorkerProcess, folder: Path) -> Iterator[Api]:
    server = ServeProcess(dev_server.address, free_port(), folder / "serve.log", folder / "home")
    yield Api(server.url, dev_server)
    server.kill()


def completed(status: dict) -> bool:
    return status["phase"] == "completed"


def test_a_budget_timeout_is_recorded_once_as_a_timeout_never_as_a_person(api: Api) -> None:
    run = api.start(token_budget=700, review_timeout=10, auto_accept_plan=True)
    api.status(run, lambda s: s["awaiting"] == "budget")
    done = api.status(run, completed)
    cut = [note for note in done["notes"] if "cut short" in note]
    assert cut == ["The research was cut short by the budget (700 tokens, $1.50): nobody decided within 0:00:10. "
                   "The report is written from what was found."], done["notes"]
    assert not done["decisions"] and not any("a person" in note for note in done["notes"])
    assert [event["message"] for event in done["events"] if event["kind"] == "budget"] == [
        "No budget decision within 0:00:10: finish"]


def test_the_operators_maxima_bound_every_run_whatever_the_request_names_or_leaves_out(api: Api) -> None:
    named_nothing = api.start(review_timeout=10, auto_accept_plan=True)
    only_tokens = api.start(token_budget=50_000, review_timeout=10, auto_accept_plan=True)
    absurd = api.post("/api/runs", json.dumps({"question": QUESTION, "review_timeout": 10, "auto_accept_plan": True,
                                               "token_budget": 10**20}).replace("}", ', "cost_budget_usd": 1e300}'))
    assert absurd.status_code == 200, absurd.text
    for run, tokens in ((named_nothing, TOKEN_MAX), (only_tokens, 50_000), (absurd.json()["id"], TOKEN_MAX)):
        done = api.status(run, completed, timeout=120)
        assert (done["budget"]["tokens"], done["budget"]["cost_usd"]) == (tokens, COST_MAX), done["budget"]
        standing = done["budget_standing"]
        assert standing["spent_usd"] <= COST_MAX and standing["spent_tokens"] <= tokens, standing
    clamped = [note for note in done["notes"] if "above the operator's maximum" in note]
    assert clamped == ["The requested token budget (1e+20) is above the operator's maximum; the run has 60,000.",
                       "The requested cost budget ($1e+300) is above the operator's maximum; the run has $1.50."]


@pytest.mark.parametrize("body", [
    '{"question": "q", "cost_budget_usd": Infinity}', '{"question": "q", "cost_budget_usd": 1e309}',
    '{"question": "q", "cost_budget_usd": NaN}', '{"question": "q", "token_budget": 1e309}'])
def test_a_non_finite_budget_is_refused_by_its_name(api: Api, body: str) -> None:
    refused = api.post("/api/runs", body)
    field = "token_budget" if "token_budget" in body else "cost_budget_usd"
    assert refused.status_code == 400 and f"{field}: Input should be a finite number" in refused.json()["detail"]


async def test_finish_now_stays_within_the_budget_and_a_non_finite_raise_is_refused_on_every_route(
        api: Api, client: Client) -> None:
    run = api.start(cost_budget_usd=1.2, auto_accept_plan=True)
    paused = api.status(run, lambda s: s["awaiting"] == "budget")
    assert any(step["state"] == "done" for step in paused["steps"]), "paused mid-research"
    for raise_to in ("Infinity", "1e309", "NaN"):
        refused = api.post(f"/api/runs/{run}/budget", f'{{"action": "raise", "cost_usd": {raise_to}}}')
        assert refused.status_code == 400, refused.text
        assert "cost_usd: Input should be a finite number" in refused.json()["detail"], refused.text
    sent = api.dev_server.cli("workflow", "update", "execute", "--workflow-id", run, "--name", "decide_budget",
                              "--input", '{"action": "raise", "cost_usd": 1e309}')
    assert sent.returncode != 0 and "cost_usd: Input should be a finite number" in sent.stderr, sent.stderr
    finished = api.post(f"/api/runs/{run}/budget", {"action": "finish"})
    assert finished.status_code == 200, finished.text
    done = api.status(run, completed)
    standing = done["budget_standing"]
    assert standing["spent_usd"] <= 1.2, "the report was written within the budget its reserve kept free"
    assert standing["spent_usd"] <= paused["budget_standing"]["spent_usd"] + paused["budget"]["expected_report_usd"]
    assert [(d["kind"], d["decision"]) for d in done["decisions"]] == [("budget", "finish")]


def test_a_start_with_a_non_finite_budget_from_the_temporal_cli_fails_naming_the_field(api: Api) -> None:
    run = run_id("infinite-budget")
    started = api.dev_server.cli("workflow", "start", "--type", WORKFLOW_TYPE, "--task-queue", TASK_QUEUE,
                                 "--workflow-id", run, "--input", '{"question": "q", "cost_budget_usd": 1e309}')
    assert started.returncode == 0, started.stderr
    failed = api.status(run, lambda s: s["phase"] == "failed")
    assert "cost_budget_usd: Input should be a finite number" in failed["error"], failed["error"]


def test_the_cli_refuses_a_non_finite_amount(api: Api) -> None:
    for args in (("run", QUESTION, "--no-wait", "--cost-budget", "inf"), ("budget", "any", "--raise-usd", "nan")):
        refused = starter(api.dev_server, *args)
        assert refused.returncode == 2 and "is not a finite amount above 0" in refused.stderr, refused.stderr


async def test_parallel_steps_each_count_their_own_calls_and_the_pause_expects_what_a_step_costs(
        api: Api, client: Client, folder: Path) -> None:
    run = api.start(token_budget=16_000, parallel_steps=True, review_timeout=10, auto_accept_plan=True)
    paused = api.status(run, lambda s: s["awaiting"] == "budget" and any(step["state"] == "done"
                                                                          for step in s["steps"]))
    history = await client.get_workflow_handle(run).fetch_history()
    worker_store = data_converter(load_settings(environ={**os.environ, "DEERFLOW_HOME": str(folder / "home")}))
    own: dict[str, int] = {}
    for summary, usage in await model_turns(history, worker_store):
        if " · step " in summary:
            step = summary.split(" · ")[1]
            own[step] = own.get(step, 0) + usage.total_tokens
    budget = paused["budget"]
    # Issue #48 item 4: two steps side by side each counted the other's calls as their own.
    assert len(budget["step_tokens"]) == 2 and sorted(budget["step_tokens"]) == sorted(own.values()), (budget, own)
    assert budget["expected_next_step"] == sum(own.values()) // 2
    api.status(run, completed)
