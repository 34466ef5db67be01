"""Research tools inside real runs (time-skipping server): the user's documents come first, and a
page is crawled once per run however often the agents ask for it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer
from tests.support.fake_http import FakeHTTPServer, Reply, Seen
from tests.support.history_checks import activity_types
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.research import Outcome

ARTICLE = "<html><head><title>{title}</title></head><body><article><h1>{title}</h1>{body}</article></body></html>"


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "sodium-ion.md").write_text(
        "# Sodium-ion cells in our fleet trial\n\nOur 2026 fleet trial found sodium-ion packs kept 91% capacity "
        "after 2,000 cycles, and cost 28% less per kWh than the lithium iron phosphate packs they replaced.\n")
    (folder / "notes.txt").write_text("Solid-state batteries for electric vehicles: our supplier expects "
                                      "pilot production of solid-state cells in 2028.\n")
    return folder


@pytest.fixture
async def documents_worker(tmp_path: Path, provider_env: dict[str, str], documents: Path,
                           worker_with: WorkerWith) -> AsyncIterator[Client]:
    """A worker whose resource root is the ``documents`` folder."""
    async with worker_with(settings_with(provider_env, DEERFLOW_HOME=str(tmp_path / "home"),
                                         DEERFLOW_RESOURCE_ROOTS=str(documents))) as client:
        yield client


async def test_resources_are_searched_first_and_cited_in_the_report(
    documents_worker: Client, model_server: FakeModelServer, documents: Path
) -> None:
    handle = await start(documents_worker, auto_accept_plan=True, max_step_num=2, resources=[str(documents)])
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    researcher_first_turns = [body for body in model_server.requests_for("researcher")
                              if not any(m["role"] == "tool" for m in body["messages"])]
    assert researcher_first_turns
    for body in researcher_first_turns:
        assert body["tools"][0]["function"]["name"] == "local_search_tool"
        assert "local_search_tool" in body["messages"][0]["content"]  # the prompt says to prefer it
        # The step input lists the documents by name (issue #49 §1: the path went into the titles).
        assert f"- {documents.name}\n" in body["messages"][1]["content"]
    # No model request, nor the report, holds the server's path: the model is never told it.
    assert str(documents) not in json.dumps(model_server.requests) + result.report
    citations = result.report.split("## Key Citations", 1)[1]
    # The researcher searches the question's subject (solid-state batteries for EVs): the document
    # on it is cited, by its name, the sodium-ion trial, which is about something else, is not.
    assert "(document://notes.txt#chunk-1)" in citations
    assert "sodium-ion.md" not in citations
    assert "pilot production" in result.report


@pytest.mark.parametrize("with_documents", [True, False])
async def test_without_the_web_nothing_is_searched_or_crawled(
    documents_worker: Client, model_server: FakeModelServer, search_server: FakeSearchServer, documents: Path,
    with_documents: bool,
) -> None:
    """DeerFlow's ``enable_web_search: false``: the documents (if any) are the only source."""
    search_server.requests.clear()
    resources = [str(documents)] if with_documents else []
    handle = await start(documents_worker, auto_accept_plan=True, max_step_num=2, enable_web_search=False,
                         resources=resources)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    history = await handle.fetch_history()
    assert not {"web_search", "crawl_tool"} & set(activity_types(history).values())
    assert search_server.requests == []  # not even the background investigation
    researcher_requests = model_server.requests_for("researcher")
    assert researcher_requests
    offered = {tool["function"]["name"] for body in researcher_requests for tool in body.get("tools") or []}
    assert offered == ({"local_search_tool"} if with_documents else set())
    assert "web search is off" in researcher_requests[0]["messages"][0]["content"].lower()
    if with_documents:
        assert "(document://notes.txt#chunk-1)" in result.report


@pytest.fixture
async def loopback_corpus(
    tmp_path: Path, provider_env: dict[str, str], worker_with: WorkerWith
) -> AsyncIterator[tuple[Client, FakeHTTPServer]]:
    """A site on 127.0.0.1, a search engine whose every result points at it, and a worker searching there."""
    def page(seen: Seen) -> Reply:
        title = seen.path.strip("/").replace("-", " ").title()
        body = "".join(f"<p>Paragraph {n} of {title}: solid-state batteries and electric vehicles.</p>"
                       for n in range(30))
        return Reply(body=ARTICLE.format(title=title, body=body))

    with FakeHTTPServer(page) as site:
        corpus = tmp_path / "corpus.json"
        corpus.write_text(json.dumps([
            {"title": f"Battery page {n}", "url": f"{site.base_url}/battery-page-{n}",
             "content": "Solid-state batteries for electric vehicles: prospects, costs and evidence.",
             "published_date": "2026-01-01"}
            for n in range(3)
        ]))
        with FakeSearchServer(corpus_path=corpus) as engine:
            async with worker_with(settings_with(provider_env, TAVILY_BASE_URL=engine.base_url,
                                                 DEERFLOW_CRAWL_ALLOW_HOSTS="127.0.0.1")) as client:
                yield client, site


async def test_a_page_is_crawled_once_per_run_even_when_steps_revisit_it(
    model_server: FakeModelServer, loopback_corpus: tuple[Client, FakeHTTPServer]
) -> None:
    client, site = loopback_corpus
    handle = await start(client, auto_accept_plan=True, max_step_num=2, enable_background_investigation=False)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT

    history = await handle.fetch_history()
    crawl_activities = [event for event in history.events
                        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                        and event.activity_task_scheduled_event_attributes.activity_type.name == "crawl_tool"]
    crawl_calls = [call for body in model_server.requests for message in body["messages"]
                   if message["role"] == "assistant" for call in message.get("tool_calls") or []
                   if call["function"]["name"] == "crawl_tool"]
    asked = {json.loads(call["function"]["arguments"])["url"] for call in crawl_calls}
    assert len(asked) == 3
    assert len(crawl_activities) == 3, "each page once, although both research steps asked for all three"
    assert sorted(seen.path for seen in site.requests) == [f"/battery-page-{n}" for n in range(3)]
    # both steps still got the page content
    assert result.plan is not None and all("Battery Page" in (s.execution_res or "") for s in result.plan.steps)


async def test_mcp_tools_are_listed_once_per_step_and_called_through_activities(
    model_server: FakeModelServer, provider_env: dict[str, str], worker_with: WorkerWith,
) -> None:
    calculator = {"transport": "stdio", "command": str(Path(sys.executable).parent / "python"),
                  "args": [str(Path(__file__).parent / "support" / "mcp_test_server.py")], "enabled_tools": ["add"]}
    # the operator's table
    async with worker_with(settings_with(provider_env, MCP_SERVERS=json.dumps({"calc": calculator}))) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=2, mcp_servers=["calc"])
        result = await handle.result()
    assert result.outcome is Outcome.REPORT

    history = await handle.fetch_history()
    scheduled = [event.activity_task_scheduled_event_attributes.activity_type.name for event in history.events
                 if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled.count("mcp_list_tools") == 2  # once per research step, recorded for replay
    assert scheduled.count("mcp_call_tool") == 2
    researcher_turns = model_server.requests_for("researcher")
    assert "mcp_calc_add" in {tool["function"]["name"] for tool in researcher_turns[0]["tools"]}
    mcp_answers = [m["content"] for body in researcher_turns for m in body["messages"]
                   if m["role"] == "tool" and m["tool_call_id"] == "call_2"]
    assert mcp_answers and mcp_answers[0] == "4"  # add(a=2, b=2) ran on the real MCP server


async def test_a_request_that_narrows_a_servers_agents_is_not_listed_for_the_others(
    model_server: FakeModelServer, provider_env: dict[str, str], worker_with: WorkerWith,
) -> None:
    calculator = {"transport": "stdio", "command": str(Path(sys.executable).parent / "python"),
                  "args": [str(Path(__file__).parent / "support" / "mcp_test_server.py")]}
    async with worker_with(settings_with(provider_env, MCP_SERVERS=json.dumps({"calc": calculator}))) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=1,
                             mcp_servers=[{"name": "calc", "add_to_agents": ["coder"]}])
        assert (await handle.result()).outcome is Outcome.REPORT
    assert "mcp_list_tools" not in activity_types(await handle.fetch_history()).values()  # researcher left out
