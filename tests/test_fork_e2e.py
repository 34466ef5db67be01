"""A fork end to end (issue #44 §2): the dev server, a real worker process on the fake model whose log
this test reads, and ``starter.py`` as a user runs it. ``fork --from step 2`` with another report
style pays for steps 2 onwards (the model's log), writes in the new style, and both runs show the link:
``status`` of the fork says where it came from, the source's lists its forks (through the
``DeerFlowForkedFrom`` search attribute the worker registered and the fork set)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer
from runtime.forks import forks_of
from tests.support.processes import DevServer, WorkerProcess, start_worker, starter
from tests.support.runs import QUESTION, listed, run_id
from workflows.contracts.research import ResearchResult

CURRENT_STEP = re.compile(r"# Current Step\n\n## Title\n\n(.+)")


@pytest.fixture
async def worker(dev_server: DevServer, client: Client, tmp_path: Path,
                 provider_env: dict[str, str]) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, tmp_path / "worker.log", **provider_env)
    yield process
    process.stop()


def steps_asked(model: FakeModelServer) -> list[str]:
    """The title of the step in each researcher's and coder's call, in order (workflows/research/messages.py)."""
    return [found.group(1) for body in model.requests for message in body.get("messages", [])
            if (found := CURRENT_STEP.search(str(message.get("content") or "")))]


async def test_a_fork_from_step_2_in_another_style_pays_for_steps_2_on_and_both_runs_show_the_link(
        dev_server: DevServer, client: Client, worker: WorkerProcess, model_server: FakeModelServer,
        search_server: FakeSearchServer, tmp_path: Path) -> None:
    source_id = run_id("fork-source-o'brien")  # a quote, escaped in the visibility query that finds its forks
    ran = starter(dev_server, "run", QUESTION, "--auto-accept", "--id", source_id, "-o", str(tmp_path / "source.md"))
    assert ran.returncode == 0, ran.stderr
    source = await client.get_workflow_handle(source_id, result_type=ResearchResult).result()
    assert source.plan is not None and len(source.plan.steps) == 3
    assert "## What We Know" not in source.report
    model_server.requests.clear()
    search_server.requests.clear()

    fork_id = f"{source_id}-fork"
    forked = starter(dev_server, "fork", source_id, "--from", "step", "2", "--report-style", "news",
                     "--fork-id", fork_id, "-o", str(tmp_path / "fork.md"), "--as", "alice")
    assert forked.returncode == 0, forked.stderr
    assert f"a fork of {source_id} at step 2" in forked.stderr

    # The fake model's log: no coordinator, no planner, no call for step 1; steps 2 and 3, then the report.
    assert model_server.requests_for("coordinator") == model_server.requests_for("planner") == []
    asked = steps_asked(model_server)
    assert asked and set(asked) == {step.title for step in source.plan.steps[1:]}
    assert len(model_server.requests_for("reporter")) == 1
    assert model_server.requests_for("reporter")[0] is model_server.requests[-1]
    assert all(request["body"].get("query") != QUESTION for request in search_server.requests)  # no background

    report = (tmp_path / "fork.md").read_text()
    assert "## What We Know" in report and "## What Remains Unclear" in report  # the news style
    result = await client.get_workflow_handle(fork_id, result_type=ResearchResult).result()
    assert result.plan is not None and result.plan.steps[0].execution_res == source.plan.steps[0].execution_res
    assert result.usage.llm_calls == len(model_server.requests)  # the fork's own spending, not the source's

    fork_status = starter(dev_server, "status", fork_id)
    assert fork_status.returncode == 0, fork_status.stderr
    assert f"Forked from {source_id} at step 2" in fork_status.stdout
    escaped = source_id.replace("'", "\\'")
    await listed(client, f"DeerFlowForkedFrom = '{escaped}'", lambda runs: [run.id for run in runs] == [fork_id])
    source_status = starter(dev_server, "status", source_id)
    assert source_status.returncode == 0, source_status.stderr
    assert f"Fork: {fork_id} at step 2 (completed, by alice (cli))" in source_status.stdout
    shown = json.loads(starter(dev_server, "status", source_id, "--json").stdout)
    assert shown["forks"] == [{"workflow_id": fork_id, "at": "step 2", "status": "completed",
                               "started_by": {"name": "alice", "via": "cli"}}]
    assert shown["forked_from"] is None
    assert [fork.workflow_id for fork in await forks_of(client, source_id)] == [fork_id]
    # inspect shows the link both ways too: the fork's from its start input, the source's from the index.
    assert f"Forked from {source_id} at step 2" in starter(dev_server, "inspect", fork_id).stdout
    inspected = json.loads(starter(dev_server, "inspect", source_id, "--json").stdout)
    assert inspected["forks"] == [{"workflow_id": fork_id, "at": "step 2"}] and inspected["forked_from"] is None


def test_a_point_the_source_never_reached_is_refused_before_anything_starts(
        dev_server: DevServer, worker: WorkerProcess) -> None:
    source_id = run_id("fork-short")
    ran = starter(dev_server, "run", QUESTION, "--auto-accept", "--max-steps", "1", "--id", source_id)
    assert ran.returncode == 0, ran.stderr
    refused = starter(dev_server, "fork", source_id, "--from", "step", "3")
    assert refused.returncode == 2
    assert f"Cannot fork {source_id} at step 3: run {source_id}'s plan has 1 step(s), not 3" in refused.stderr
    unknown = starter(dev_server, "fork", "no-such-run", "--from", "report")
    assert unknown.returncode == 2 and "No research run with ID 'no-such-run'" in unknown.stderr
    usage = starter(dev_server, "fork", source_id, "--from", "steps")
    assert usage.returncode == 2 and "--from is plan, step N or report" in usage.stderr
