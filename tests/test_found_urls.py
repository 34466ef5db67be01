"""Only a URL a step found may be crawled, in either tool mode (issue #42, item 7).

SmolLM2-135M and Gemma-3-270M on llama-server searched for URLs they had made up; the search found
nothing and answered ``No results found for '<the URL>'.``, and JSON tool mode, which offered a
``url`` argument every URL in the conversation's text, then offered that URL to crawl. Found URLs are
now kept by where they came from (``workflows/research/found_urls.py``). Played here with the fake model as
llama-server plays JSON mode (its grammar writes only what the schema allows) and natively, on a site
and a search engine on loopback that the crawler may reach, so a crawl the guard let through shows.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from activities.model import json_tools
from offline.model_server import FakeModelServer, Fault
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from tests.support.fake_http import FakeHTTPServer, Reply, Seen
from tests.support.history_checks import activity_types
from tests.support.processes import DevServer, start_worker
from tests.support.runs import run_id, start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.chat import ChatMessage, ToolCall
from workflows.contracts.plan import Plan, Step, StepType
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult
from workflows.contracts.tool_activities import SearchResponse, SearchResult
from workflows.research import found_urls
from workflows.research.found_urls import FoundUrls, background_urls, task_urls, urls_in
from workflows.research.messages import BACKGROUND_INVESTIGATION, background_message
from workflows.research.tools import UNFOUND_URL_MESSAGE

MADE_UP = "zqx-invented-quasar"  # no page of the corpus is about it: a search for it finds nothing
ARTICLE = "<html><head><title>{title}</title></head><body><article><h1>{title}</h1>{body}</article></body></html>"


# ---------------------------------------------------------------- what counts as found


def test_urls_are_read_as_written_up_to_where_text_ends_them() -> None:
    text = ('See [the report](https://a.example/report?x=1&y=2), "http://b.example/p" and <https://c.example>. '
            "Also https://d.example/end. and https:// alone, httpx://no, http://e.example/a|b")
    assert urls_in(text) == ["https://a.example/report?x=1&y=2", "http://b.example/p", "https://c.example",
                             "https://d.example/end", "http://e.example/a"]
    assert urls_in("https://x.example/1 " * 100, limit=3) == ["https://x.example/1"] * 3
    runs = urls_in("http" * 200_000 + "https://" * 200_000)  # pathological runs, read in one pass each
    assert len(runs) == 1 and FoundUrls(runs).choices([]) == []  # one over-long "URL", which nothing finds


def test_a_found_url_is_known_however_its_scheme_and_host_are_written() -> None:
    found = FoundUrls(["https://T.example/Tides#top", "ftp://t.example/file", "https://t.example/" + "x" * 2_000])
    assert found.holds("HTTPS://t.example/Tides") and not found.holds("https://t.example/tides")
    assert not found.holds("ftp://t.example/file") and found.choices([]) == ["https://T.example/Tides#top"]
    found.add(["https://t.example/moon", "https://t.example/sun"])
    used = [ChatMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="crawl_tool",
                                                               arguments={"url": "https://t.example/moon"})])]
    assert found.choices(used) == ["https://T.example/Tides#top", "https://t.example/sun"]
    assert found.choices(used, limit=1) == ["https://t.example/sun"]  # the newest
    assert found_urls.MAX_URL_CHARS == json_tools.MAX_CHARS  # JSON mode's bound on a value


def test_a_steps_task_finds_the_questions_and_the_plans_urls_not_earlier_findings() -> None:
    plan = Plan(title="Tides at https://plan.example/title", thought="Start from https://plan.example/thought.",
                steps=[Step(title="Read https://plan.example/step", description="and https://plan.example/desc",
                            step_type=StepType.RESEARCH, execution_res="I made up https://finding.example/x")])
    assert task_urls("What does https://question.example/paper say?", plan) == [
        "https://question.example/paper", "https://plan.example/title", "https://plan.example/thought",
        "https://plan.example/step", "https://plan.example/desc"]


def test_the_background_investigation_finds_its_results_urls_not_its_query_nor_their_text() -> None:
    """The query is the coordinator model's research topic: a URL it made up and searched for is not found."""
    found = SearchResponse(query="https://made-up.example/topic", results=[
        SearchResult(title="Tides", url="https://background.example/tides", content="see https://text.example/x")])
    messages = [ChatMessage(role="user", content="How do tides work?"), background_message(found)]
    assert background_urls(messages) == ["https://background.example/tides"]
    assert background_urls([background_message(SearchResponse(query="https://made-up.example/topic"))]) == []
    for content in ("background investigation results\n" + "[" * 5_000, "no JSON", '\n{"url": "https://x.example"}'):
        assert background_urls([ChatMessage(role="user", name=BACKGROUND_INVESTIGATION, content=content)]) == []


# ---------------------------------------------------------------- in runs, on loopback


def page(site: str, seen: Seen) -> Reply:
    """A page of the site at ``site``; the question's page links to another."""
    name = seen.path.strip("/")
    link = f'<p>More in <a href="{site}/linked-page">the linked page</a>.</p>' if name == "question-page" else ""
    return Reply(body=ARTICLE.format(title=name.replace("-", " ").title(),
                                     body=link + "<p>Tides rise and fall twice a day with the moon.</p>" * 20))


@pytest.fixture
def site() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer(lambda seen: Reply(404)) as server:
        server.handler = functools.partial(page, server.base_url)
        yield server


@pytest.fixture
def engine(tmp_path: Path, site: FakeHTTPServer) -> Iterator[FakeSearchServer]:
    """A search engine whose one page is on the site; it finds nothing for a made-up URL."""
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([{"title": "How tides work", "url": f"{site.base_url}/tides-page",
                                   "content": "Tides rise and fall twice a day with the moon.",
                                   "published_date": "2026-01-01"}]))
    with FakeSearchServer(corpus_path=corpus) as server:
        yield server


@pytest.fixture
def llama() -> Iterator[FakeModelServer]:
    """llama-server with the model's own template: ``tools`` (and ``tool_choice``) dropped, ``json_schema`` enforced."""
    with FakeModelServer(ignore_tools=True) as server:
        yield server


@pytest.fixture(params=["native", "json"])
def mode(request: pytest.FixtureRequest) -> str:
    """The tool mode: native calls (the fake obeys no schema), or JSON mode on llama-server."""
    return str(request.param)


@pytest.fixture
def model(mode: str, model_server: FakeModelServer, llama: FakeModelServer) -> FakeModelServer:
    return llama if mode == "json" else model_server


Research = Callable[..., Awaitable[WorkflowHandle]]


@pytest.fixture
def research(worker_with: WorkerWith, provider_env: dict[str, str], engine: FakeSearchServer, mode: str,
             model: FakeModelServer) -> Research:
    """``await research(question, documents=None, background=False)``: a one-step run on a worker of the
    test's mode, searching ``engine`` (before planning too, with ``background``) and reaching the site;
    its handle once it reported."""
    async def run(question: str, documents: Path | None = None, background: bool = False) -> WorkflowHandle:
        roots = {"DEERFLOW_RESOURCE_ROOTS": str(documents)} if documents else {}
        settings = settings_with(provider_env, OPENAI_BASE_URL=model.base_url, LLM_TOOL_MODE=mode,
                                 TAVILY_BASE_URL=engine.base_url, DEERFLOW_CRAWL_ALLOW_HOSTS="127.0.0.1", **roots)
        async with worker_with(settings) as client:
            handle = await start(client, question=question, auto_accept_plan=True, max_step_num=1,
                                 enable_background_investigation=background,
                                 resources=[str(documents)] if documents else [])
            assert (await handle.result()).outcome is Outcome.REPORT
        return handle
    return run


async def crawled(handle: WorkflowHandle) -> int:
    return list(activity_types(await handle.fetch_history()).values()).count("crawl_tool")


def offered_urls(model: FakeModelServer) -> set[str]:
    """Every URL a JSON-mode researcher turn offered a ``url`` argument."""
    return {url for body in model.requests_for("researcher") if "response_format" in body
            for option in body["response_format"]["json_schema"]["schema"]["anyOf"]
            for url in (((option["properties"].get("arguments") or {}).get("properties") or {})
                        .get("url") or {}).get("enum", [])}


def tool_outputs(model: FakeModelServer) -> list[str]:
    """What the researcher's last turn read of its tools (native messages or JSON mode's "Result of")."""
    last = model.requests_for("researcher")[-1]["messages"]
    return [str(message["content"]) for message in last if message["role"] == "tool"
            or str(message.get("content") or "").startswith("Result of ")]


async def test_a_url_the_model_made_up_and_searched_for_is_never_crawled(
    mode: str, model: FakeModelServer, research: Research, site: FakeHTTPServer
) -> None:
    invented = f"{site.base_url}/{MADE_UP}"
    model.inject(Fault.call("web_search", {"query": invented}, agent="researcher"),
                 Fault.call("crawl_tool", {"url": invented}, agent="researcher"))
    handle = await research("How do tides work?")

    assert not model.pending_faults
    outputs = tool_outputs(model)
    assert any(f"No results found for {invented!r}" in output for output in outputs), outputs
    assert await crawled(handle) == 0 and site.requests == []
    if mode == "json":  # the grammar never let the model write it: the schema never listed it
        assert invented not in offered_urls(model)
    else:  # the model called it natively: the step refused it and said why
        assert any(UNFOUND_URL_MESSAGE in output for output in outputs), outputs


async def test_the_questions_url_and_the_links_of_a_page_read_may_be_crawled(
    mode: str, model: FakeModelServer, research: Research, site: FakeHTTPServer
) -> None:
    asked = f"{site.base_url}/question-page"
    model.inject(Fault.call("crawl_tool", {"url": asked}, agent="researcher"),
                 Fault.call("crawl_tool", {"url": f"{site.base_url}/linked-page"}, agent="researcher"))
    handle = await research(f"What does {asked} say about tides?")

    assert not model.pending_faults
    assert [seen.path for seen in site.requests][:2] == ["/question-page", "/linked-page"]
    assert await crawled(handle) >= 2
    if mode == "json":
        assert {asked, f"{site.base_url}/linked-page"} <= offered_urls(model)


async def test_a_url_the_background_investigation_found_may_be_crawled(
    mode: str, model: FakeModelServer, research: Research, site: FakeHTTPServer
) -> None:
    """Its search results are search results: the step's first turn may crawl one without searching again."""
    background = f"{site.base_url}/tides-page"
    model.inject(Fault.call("crawl_tool", {"url": background}, agent="researcher"))
    handle = await research("How do tides work?", background=True)

    assert not model.pending_faults
    assert "web_search" in list(activity_types(await handle.fetch_history()).values())  # the background search
    assert [seen.path for seen in site.requests][:1] == ["/tides-page"]
    assert await crawled(handle) >= 1
    if mode == "json":
        assert background in offered_urls(model)


async def test_a_background_search_for_a_url_the_coordinator_made_up_finds_nothing_to_crawl(
    mode: str, model: FakeModelServer, research: Research, site: FakeHTTPServer
) -> None:
    """The background search's query is the coordinator model's research topic, its own words."""
    invented = f"{site.base_url}/{MADE_UP}"
    model.inject(Fault.call("handoff_to_planner", {"research_topic": invented, "locale": "en-US"},
                            agent="coordinator"),
                 Fault.call("crawl_tool", {"url": invented}, agent="researcher"))
    handle = await research("How do tides work?", background=True)

    assert not model.pending_faults
    searched = [body for body in model.requests_for("planner")
                if any(message.get("name") == BACKGROUND_INVESTIGATION for message in body["messages"])]
    assert searched, "the planner never read a background investigation"
    assert await crawled(handle) == 0 and site.requests == []
    if mode == "json":
        assert invented not in offered_urls(model)
    else:
        assert any(UNFOUND_URL_MESSAGE in output for output in tool_outputs(model)), tool_outputs(model)


async def test_a_url_the_users_documents_hold_may_be_crawled(
    model: FakeModelServer, research: Research, site: FakeHTTPServer, tmp_path: Path
) -> None:
    documents = tmp_path / "documents"
    documents.mkdir()
    cited = f"{site.base_url}/document-page"
    (documents / "tides.md").write_text(f"# Tidal stream turbines\n\nOur survey of the turbines is at {cited}.\n")
    model.inject(Fault.call("local_search_tool", {"query": "tidal stream turbines survey"}, agent="researcher"),
                 Fault.call("crawl_tool", {"url": cited}, agent="researcher"))
    handle = await research("How do tides work?", documents)

    assert not model.pending_faults
    assert "/document-page" in [seen.path for seen in site.requests]
    assert await crawled(handle) >= 1


@pytest.mark.timeout(240)
async def test_a_worker_never_fetches_a_url_its_model_made_up(
    mode: str, model: FakeModelServer, dev_server: DevServer, client: Client, engine: FakeSearchServer,
    site: FakeHTTPServer, tmp_path: Path
) -> None:
    """End to end, as seen on llama-server (a real worker process on the dev server): the search for a
    made-up URL finds nothing, and the worker's crawler is never asked for that URL."""
    invented = f"{site.base_url}/{MADE_UP}"
    model.inject(Fault.call("web_search", {"query": invented}, agent="researcher"),
                 Fault.call("crawl_tool", {"url": invented}, agent="researcher"))
    worker = await start_worker(dev_server, client, tmp_path / "worker.log", **offline_env(model, engine),
                                LLM_TOOL_MODE=mode, DEERFLOW_CRAWL_ALLOW_HOSTS="127.0.0.1")
    try:
        handle = await client.start_workflow(
            WORKFLOW_TYPE, ResearchRequest(question="How do tides work?", auto_accept_plan=True, max_step_num=1,
                                           enable_background_investigation=False),
            id=run_id("made-up-url"), task_queue=TASK_QUEUE, result_type=ResearchResult)
        assert (await asyncio.wait_for(handle.result(), 180)).outcome is Outcome.REPORT
    finally:
        worker.stop()
    assert not model.pending_faults
    assert any(f"No results found for {invented!r}" in output for output in tool_outputs(model))
    assert await crawled(handle) == 0 and site.requests == []
