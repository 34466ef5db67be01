"""``POST /api/prompt/enhance`` over HTTP, against the dev server and a real worker process.

DeerFlow's request and answer shape (../shared/deerflow-web/API.md), the offline model playing the
enhancer, size and style limits refused before anything starts, and failures as JSON errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.client import Client, WorkflowFailureError

from config.settings import load_settings
from offline.model_server import FakeModelServer, Fault
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from tests.support.processes import DevServer, start_worker
from tests.support.runs import run_id
from tests.support.web_server import api_server
from workflows.contracts.enhance import ENHANCER_WORKFLOW, MAX_PROMPT_CHARS, enhanced_text
from workflows.contracts.research import TASK_QUEUE

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
async def base(dev_server: DevServer, client: Client, model_server: FakeModelServer, search_server: FakeSearchServer,
               tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    home = tmp_path_factory.mktemp("enhance")
    process = await start_worker(dev_server, client, home / "worker.log", **offline_env(model_server, search_server),
                                 DEERFLOW_HOME=str(home))
    async with api_server(client, load_settings().model_copy(update={"web_token": None})) as url:
        yield url
    process.stop()


async def enhance(base: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=100) as http:
        return await http.post(f"{base}/api/prompt/enhance", json=body)


async def test_deerflow_request_gets_an_enhanced_prompt(base: str, model_server: FakeModelServer) -> None:
    response = await enhance(base, {"prompt": "heat pumps vs gas boilers", "context": "for a UK home",
                                    "report_style": "STRATEGIC_INVESTMENT"})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result.startswith("Research heat pumps vs gas boilers.") and "for a UK home" in result
    assert "growth drivers" in result and "<enhanced_prompt>" not in result
    [sent] = model_server.requests_for("prompt_enhancer")
    assert "Report style: strategic_investment" in sent["messages"][0]["content"]


@pytest.mark.parametrize(("body", "problem"), [
    ({"prompt": ""}, "prompt"),
    ({"prompt": "   "}, "prompt"),
    ({"prompt": "x" * (MAX_PROMPT_CHARS + 1)}, "prompt"),
    ({"prompt": "ok", "context": "y" * 9000}, "context"),
    ({"prompt": "ok", "report_style": "limerick"}, "report_style"),
    (["not", "an", "object"], "dictionary"),
])
async def test_bad_requests_are_refused_before_anything_starts(base: str, body: object, problem: str) -> None:
    response = await enhance(base, body)
    assert response.status_code == 400 and problem in response.json()["detail"], response.text


async def test_a_model_that_fails_for_good_is_a_json_error(base: str, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.status(401, "bad key", agent="prompt_enhancer"))
    response = await enhance(base, {"prompt": "tides"})
    assert response.status_code == 502 and "bad key" in response.json()["detail"], response.text


async def test_a_bad_input_from_any_client_fails_the_run_at_once(base: str, client: Client) -> None:
    handle = await client.start_workflow(ENHANCER_WORKFLOW, {"prompt": 42}, id=run_id("enhance"),
                                         task_queue=TASK_QUEUE)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert "Invalid request: prompt" in str(failed.value.cause)


def test_the_enhanced_prompt_is_taken_from_its_tags() -> None:
    assert enhanced_text("Sure!\n<enhanced_prompt>\nBetter.\n</enhanced_prompt>", "orig") == "Better."
    assert enhanced_text("<enhanced_prompt>Cut off", "orig") == "Cut off"
    assert enhanced_text("Plain reply", "orig") == "Plain reply"
    assert enhanced_text("<enhanced_prompt></enhanced_prompt>", "orig") == "orig"
