"""The budget pause through the CLI, end to end (issue #26, item 1): the dev server, a real worker
process and ``starter.py`` as a user runs it. A run started with ``--token-budget`` and
``--cost-budget`` pauses at its budget; ``status`` says so with spent, remaining and the commands;
``starter.py budget --finish`` resumes it to a report whose last line says it was cut short; the
decision is recorded as the CLI user's; ``watch`` ends on the budget's standing.

The worker prices the offline model at one USD per million tokens each way (tests/test_budget.py:
7,000 tokens are crossed before the second step).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.support.processes import DevServer, WorkerProcess, start_worker, starter, wait_for_cli_status
from tests.support.runs import QUESTION, run_id

PRICED = json.dumps({"deerflow-offline-demo": {"input": 1, "output": 1}})


@pytest.fixture
async def worker(dev_server: DevServer, client: Client, tmp_path: Path) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, tmp_path / "worker.log", DEERFLOW_MODEL_PRICES=PRICED)
    yield process
    process.stop()


def test_a_run_paused_at_its_budget_is_finished_from_the_cli_and_says_it_was_cut_short(
        dev_server: DevServer, worker: WorkerProcess, tmp_path: Path) -> None:
    workflow_id = run_id("budget-cli")
    started = starter(dev_server, "run", QUESTION, "--no-wait", "--id", workflow_id, "--auto-accept",
                      "--token-budget", "7000", "--cost-budget", "5")
    assert started.returncode == 0, started.stderr
    paused = wait_for_cli_status(dev_server, workflow_id, lambda s: s["awaiting"] == "budget", timeout=60)
    assert paused["phase"] == "awaiting_budget"
    standing = paused["budget_standing"]
    assert standing["spent_tokens"] > 0 and standing["spent_usd"] == standing["spent_tokens"] / 1_000_000
    assert standing["remaining_usd"] == pytest.approx(5 - standing["spent_usd"])

    status = starter(dev_server, "status", workflow_id)
    assert status.returncode == 0, status.stderr
    assert "Awaiting a budget decision" in status.stdout and "of 7,000 tokens spent" in status.stdout
    assert "of $5.00 spent" in status.stdout and "finishing now, the report is expected to cost" in status.stdout
    # Paused before its first step (the report's reserve): no step's cost is known yet, and it says so.
    assert "no step has finished yet, so what a step costs is not known" in status.stdout
    assert f"python starter.py budget {workflow_id} --finish" in status.stdout

    refused = starter(dev_server, "budget", workflow_id, "--raise-usd", "0.5")  # a raise must raise
    assert refused.returncode == 2 and "must go above the current budget of $5.00" in refused.stderr, refused.stderr
    finished = starter(dev_server, "budget", workflow_id, "--finish")
    assert finished.returncode == 0, finished.stderr
    assert "Budget decision taken: finish" in finished.stdout

    done = wait_for_cli_status(dev_server, workflow_id, lambda s: s["phase"] == "completed", timeout=60)
    assert [(d["kind"], d["decision"], d["by"]) for d in done["decisions"]] == [
        ("budget", "finish", {"name": getpass.getuser(), "via": "cli"})]
    report_file = tmp_path / "report.md"
    report = starter(dev_server, "report", workflow_id, "-o", str(report_file))
    assert report.returncode == 0, report.stderr
    text = report_file.read_text()
    assert "The research was cut short by the budget (7,000 tokens, $5.00)" in text
    footer = text.rstrip().splitlines()[-1]
    assert footer.startswith("*Budget: ") and "(cut short): the report is written from what was found" in footer

    watched = starter(dev_server, "watch", workflow_id)
    assert watched.returncode == 0, watched.stderr
    last = watched.stdout.strip().splitlines()[-1]
    assert "run completed" in last and "budget: " in last and "of 7,000 tokens spent" in last, last
