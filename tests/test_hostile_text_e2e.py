"""Hostile text end to end (issue #42 §1, §2, §9): the dev server, a real worker process and ``starter.py
serve``, driven over HTTP as any token holder could.

Seen before: a report of "[" x 120,000 to ``/api/report/evaluate`` held the worker in workflow code
(400 KB: the stall watchdog ended the worker, and its replacement died on the retried task) and the
request answered 504; "<mark " x 60,000 to ``/api/prose/generate`` held the API server's event loop;
a composer, writer or judge replying JSON 3,000 arrays deep or with a lone surrogate failed workflow
tasks until the request gave up with a 504 after ``DEERFLOW_WEB_CONTENT_WAIT``; a plan holding a run
of 60,000 blanks failed workflow tasks for a minute before the review. Now each is answered at once
(a 200, or a 502 naming why), and no workflow task fails.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from offline.model_faults import Fault
from offline.model_server import FakeModelServer
from tests.support.processes import DevServer, ServeProcess, WorkerProcess, free_port, start_worker, starter
from tests.support.runs import QUESTION, SAMPLE_REPORT, awaiting_review, wait_for
from workflows.contracts.research import TASK_QUEUE
from workflows.contracts.slides import SLIDES_WORKFLOW, SlidesRequest, SlidesResult

pytestmark = pytest.mark.timeout(300)

DEEP = "```json\n" + "[" * 3000 + "]" * 3000 + "\n```"
# The request's wait: a reply that failed workflow tasks would be a 504 after this; a 502 is the answer.
WAIT = "240"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-text")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, folder: Path,
                 provider_env: dict[str, str]) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, folder / "worker.log", **provider_env,
                                 DEERFLOW_HOME=str(folder / "home"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def api(dev_server: DevServer, worker: WorkerProcess, folder: Path) -> Iterator[str]:
    server = ServeProcess(dev_server.address, free_port(), folder / "serve.log", folder / "home",
                          {"DEERFLOW_WEB_CONTENT_WAIT": WAIT})
    yield server.url
    server.kill()


async def post(api: str, path: str, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(timeout=float(WAIT) + 30) as http:
        return await http.post(f"{api}{path}", json=body)


async def task_failures(client: Client, workflow_type: str) -> int:
    """Workflow task failures in every run of ``workflow_type`` this module started."""
    failures = 0
    async for execution in client.list_workflows(f"WorkflowType = '{workflow_type}'"):
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        failures += sum(event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for event in history.events)
    return failures


async def test_a_report_of_400_000_brackets_is_evaluated(api: str, client: Client) -> None:
    response = await post(api, "/api/report/evaluate", {"content": "[" * 400_000, "report_style": "news"})
    assert response.status_code == 200, response.text
    assert response.json()["metrics"]["citation_count"] == 0
    assert await task_failures(client, "ReportEvaluatorWorkflow") == 0


async def test_a_flood_of_highlight_tags_is_answered(api: str) -> None:
    prompt = "<mark " * 60_000 + "<mark>Tides</mark> rise."
    response = await post(api, "/api/prose/generate", {"prompt": prompt, "option": "improve"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(("path", "body", "agent"), [
    ("/api/ppt/generate", {"content": SAMPLE_REPORT}, "presentation_composer"),
    ("/api/podcast/generate", {"content": SAMPLE_REPORT}, "podcast_script_writer"),
], ids=["slides", "podcast"])
async def test_a_reply_too_deep_to_read_is_a_prompt_502(api: str, model_server: FakeModelServer, path: str,
                                                         body: dict, agent: str) -> None:
    model_server.inject(Fault.reply(DEEP, agent=agent))
    response = await post(api, path, body)
    assert response.status_code == 502, response.text
    assert "nested deeper than" in response.json()["detail"]


async def test_a_lone_surrogate_in_the_deck_is_read(api: str, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.reply('{"title": "Tides \\ud800", "slides": [{"title": "Why", "bullets": ["a"]}]}',
                                    agent="presentation_composer"))
    response = await post(api, "/api/ppt/generate", {"content": SAMPLE_REPORT})
    assert response.status_code == 200, response.text


async def test_a_judge_too_deep_to_read_leaves_an_answer(api: str, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.reply(DEEP, agent="report_judge"))
    response = await post(api, "/api/report/evaluate", {"content": SAMPLE_REPORT, "use_llm": True})
    assert response.status_code == 200, response.text
    assert response.json()["llm_evaluation"]["weaknesses"] == ["Evaluation parsing failed"]


async def test_a_plan_holding_60_000_blanks_reaches_the_review(api: str, client: Client,
                                                              model_server: FakeModelServer) -> None:
    plan = ('{"locale": "en-US", "has_enough_context": false, "thought": "t", "title": "Tides",' + " " * 60_000
            + '"steps": [{"need_search": true, "title": "How tides form", "description": "d", '
            '"step_type": "research"}]}')
    model_server.inject(Fault.reply(plan, agent="planner"))
    run = (await post(api, "/api/runs", {"question": QUESTION})).json()["id"]
    handle = client.get_workflow_handle(run)
    try:
        status = await wait_for(handle, awaiting_review, timeout=180)
        assert status.plan is not None and status.plan.title == "Tides"
        history = await handle.fetch_history()
        assert not any(event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for event in history.events)
    finally:
        await handle.terminate("test over")


async def test_evaluate_on_a_slides_run_is_one_line_and_exit_2(api: str, client: Client,
                                                              dev_server: DevServer) -> None:
    """Issue #42 §9: ``starter.py evaluate`` on a content flow's run (it printed pydantic's many lines, exit 1)."""
    flow = f"slides-{uuid.uuid4().hex[:8]}"
    await client.execute_workflow(SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT), id=flow,
                                  task_queue=TASK_QUEUE, result_type=SlidesResult)
    refused = starter(dev_server, "evaluate", flow)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"Error: {flow} is not a research run (it is a {SLIDES_WORKFLOW}): "
        "only a research run has a report to work on."]
