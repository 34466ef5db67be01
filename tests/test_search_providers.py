"""Every ``SEARCH_API`` provider besides Tavily, through its real client, against a loopback fake.

Why this way: the error sorting depends on what each client does with an HTTP failure (ddgs
swallows statuses, arxiv.py keeps the status but drops headers, httpx keeps both), so the tests
send real HTTP to fakes that answer like the real services, bodies and headers included, rather
than mocking the clients. The ``loopback_only`` guard fails any test whose code tries to reach
anything but 127.0.0.1, so a provider falling back to its public endpoint cannot pass unnoticed.
"""

from __future__ import annotations

import asyncio
import html
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.web.search import CONFIG_ERROR, RATE_LIMITED, UNAVAILABLE, SearchActivities, supported_providers
from activities.web.search_providers.wikipedia import WikipediaSearch
from config.groups.search import SEARCH_APIS
from config.settings import ConfigError, Settings, load_settings
from tests.support import fake_http
from tests.support.fake_http import FakeHTTPServer, LoopbackGuard, Reply, Seen, is_loopback, loopback_only
from workflows.contracts.tool_activities import SearchRequest, SearchResponse

__all__ = ["loopback_only"]  # the fixture, imported so pytest finds it here

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "DDGS_PROXY")
KEY = "test-key"


@dataclass(frozen=True)
class Doc:
    title: str
    url: str
    content: str
    date: str  # ISO date


CORPUS = [
    Doc("Solar power", "https://example.org/solar-power",
        "Solar power converts sunlight into electricity with photovoltaic panels or concentrated heat.", "2024-03-01"),
    Doc("Wind power", "https://example.org/wind-power",
        "Wind turbines turn the kinetic energy of moving air into electricity, onshore and offshore.", "2024-02-11"),
    Doc("Hydroelectricity", "https://example.org/hydro",
        "Hydroelectric plants generate electricity from falling or flowing water held behind dams.", "2023-12-05"),
    Doc("Geothermal energy", "https://example.org/geothermal",
        "Geothermal plants tap heat from the Earth's crust to drive turbines and heat buildings.", "2023-10-20"),
    Doc("Tidal power", "https://example.org/tidal",
        "Tidal power harnesses the rise and fall of the sea, which is predictable years ahead.", "2023-08-14"),
]  # fmt: skip


# ---------------------------------------------------------------- the fakes, one per provider


def brave_fault(status: int, retry_after: int | None = None, code: str | None = None, detail: str = "") -> Reply:
    """Brave's error body: ``{"type": "ErrorResponse", "error": {"id", "status", "code", "detail", "meta"}}``."""
    codes = {401: "UNAUTHORIZED", 403: "FORBIDDEN", 422: "VALIDATION", 429: "RATE_LIMITED", 400: "BAD_REQUEST"}
    details = {429: "Request rate limit exceeded for plan.", 422: "Unable to validate request parameter(s)"}
    headers = {"X-RateLimit-Limit": "1, 2000", "X-RateLimit-Remaining": "0, 1990", "X-RateLimit-Reset": "1, 2591000"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = {
        "type": "ErrorResponse",
        "error": {
            "id": "5d6a9e6c-1b0e-4f5e-9a57-0d3c2a5b7e11",
            "status": status,
            "code": code or codes.get(status, "INTERNAL_ERROR"),
            "detail": detail or details.get(status, f"Error {status}."),
            "meta": {"plan": "Free", "rate_limit": 1, "rate_current": 2} if status == 429 else {},
        },
        "time": 1754364294,
    }
    return Reply(status, body, headers)


def brave_answer(seen: Seen) -> Reply:
    """``/web/search``; a wrong token gets the 422 Brave really sends. Ignores ``count`` (capping is ours)."""
    if seen.path != "/res/v1/web/search":
        error = {"status": 404, "code": "NOT_FOUND", "detail": "Not found"}
        return Reply(404, {"type": "ErrorResponse", "error": error})
    if seen.headers.get("x-subscription-token") != KEY:
        return brave_fault(422, code="SUBSCRIPTION_TOKEN_INVALID", detail="The provided subscription token is invalid.")
    results = [
        {
            "title": doc.title.replace("power", "<strong>power</strong>"),
            "url": doc.url,
            "is_source_local": False,
            "is_source_both": False,
            "description": doc.content.replace("electricity", "<strong>electricity</strong>"),
            "page_age": f"{doc.date}T08:00:00",
            "age": "March 1, 2024",
            "profile": {"name": "Example", "url": doc.url, "long_name": "example.org"},
            "language": "en",
            "family_friendly": True,
            "type": "search_result",
            "subtype": "generic",
            "meta_url": {"scheme": "https", "netloc": "example.org", "hostname": "example.org", "path": "› wiki"},
            "extra_snippets": ["Renewable &amp; clean."],
        }
        for doc in CORPUS
    ]
    return Reply(
        200,
        {
            "type": "search",
            "query": {"original": seen.param("q"), "show_strict_warning": False, "more_results_available": True},
            "mixed": {"type": "mixed", "main": [{"type": "web", "index": i, "all": False} for i in range(5)]},
            "web": {"type": "search", "results": results, "family_friendly": True},
        },
    )


def serper_fault(status: int, retry_after: int | None = None) -> Reply:
    """Serper's error body: ``{"message", "statusCode"}``; a bad key is 403 "Unauthorized."."""
    messages = {403: "Unauthorized.", 429: "Too many requests.", 400: "Not enough credits", 401: "Unauthorized."}
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status, {"message": messages.get(status, "Internal server error"), "statusCode": status}, headers)


def serper_answer(seen: Seen) -> Reply:
    if seen.method != "POST" or seen.path != "/search":
        return Reply(404, {"message": "Not found", "statusCode": 404})
    if seen.headers.get("x-api-key") != KEY:
        return serper_fault(403)
    body = seen.json()
    organic = [
        {"title": doc.title, "link": doc.url, "snippet": doc.content, "date": "Mar 1, 2024", "position": i + 1}
        for i, doc in enumerate(CORPUS)
    ]
    organic[1].pop("date")  # Serper omits the date when Google shows none
    return Reply(
        200,
        {
            "searchParameters": {"q": body["q"], "type": "search", "num": body.get("num", 10), "engine": "google"},
            "organic": organic,
            "peopleAlsoAsk": [{"question": "Is solar power renewable?", "snippet": "Yes.", "link": CORPUS[0].url}],
            "relatedSearches": [{"query": "renewable energy sources"}],
            "credits": 1,
        },
    )


WERKZEUG_403 = (
    "<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n<p>You don&#39;t have the "
    "permission to access the requested resource. It is either read-protected or not readable by the server.</p>\n"
)


def searx_fault(status: int, retry_after: int | None = None) -> Reply:
    """SearXNG (Flask) answers errors with werkzeug's small HTML pages."""
    titles = {401: "Unauthorized", 403: "Forbidden", 429: "Too Many Requests", 400: "Bad Request"}
    title = titles.get(status, "Internal Server Error")
    body = WERKZEUG_403 if status == 403 else f"<!doctype html>\n<html lang=en>\n<title>{status} {title}</title>\n"
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status, body, headers)


def searx_answer(seen: Seen) -> Reply:
    if seen.path != "/search":
        return Reply(404, "<!doctype html><title>404 Not Found</title>")
    if seen.param("format") != "json":
        return searx_fault(403)  # what an instance without the json format says
    results = [
        {
            "url": doc.url,
            "title": doc.title,
            "content": doc.content,
            "publishedDate": f"{doc.date}T00:00:00" if i != 2 else None,
            "thumbnail": "",
            "engine": "duckduckgo",
            "template": "default.html",
            "parsed_url": ["https", "example.org", "/", "", "", ""],
            "img_src": "",
            "priority": "",
            "engines": ["duckduckgo", "brave"],
            "positions": [i + 1, i + 2],
            "score": round(4.0 / (i + 1), 3),
            "category": "general",
        }
        for i, doc in enumerate(CORPUS)
    ]
    return Reply(
        200,
        {
            "query": seen.param("q"),
            "number_of_results": 0,
            "results": results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": ["renewable energy"],
            "unresponsive_engines": [],
        },
    )


def _atom_entry(index: int, doc: Doc) -> str:
    paper = f"2403.{index + 1:05d}"
    authors = "".join(f"<author><name>Author {index}-{n}</name></author>" for n in range(7 if index == 0 else 2))
    return f"""
  <entry>
    <id>http://arxiv.org/abs/{paper}v1</id>
    <title>{html.escape(doc.title)}:\n    a   survey</title>
    <updated>{doc.date}T18:00:00Z</updated>
    <link href="https://arxiv.org/abs/{paper}v1" rel="alternate" type="text/html"/>
    <link href="https://arxiv.org/pdf/{paper}v1" rel="related" type="application/pdf" title="pdf"/>
    <summary>  {html.escape(doc.content)}\n  More detail follows.
</summary>
    <category term="physics.soc-ph" scheme="http://arxiv.org/schemas/atom"/>
    <published>{doc.date}T18:00:00Z</published>
    <arxiv:comment>12 pages, 3 figures</arxiv:comment>
    <arxiv:primary_category term="physics.soc-ph"/>
    {authors}
  </entry>"""


def arxiv_feed(entries: list[str], query: str, total: int) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/"
      xmlns:arxiv="http://arxiv.org/schemas/atom">
  <id>https://arxiv.org/api/7Nv4cY0VWf5kGqgYk1K1r3vYkz0</id>
  <title>arXiv Query: search_query={html.escape(query)}&amp;id_list=&amp;start=0&amp;max_results={len(entries)}</title>
  <updated>2024-03-05T00:00:00Z</updated>
  <link href="https://arxiv.org/api/query?search_query={quote(query)}" type="application/atom+xml"/>
  <opensearch:itemsPerPage>{len(entries)}</opensearch:itemsPerPage>
  <opensearch:totalResults>{total}</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>{"".join(entries)}
</feed>
"""


ARXIV_ERROR_ENTRY = """
  <entry>
    <id>http://arxiv.org/api/errors#incorrect_id_format_for_1234.12345v99</id>
    <title>Error</title>
    <summary>incorrect id format for 1234.12345v99</summary>
    <updated>2024-03-05T00:00:00-05:00</updated>
    <published>2024-03-05T00:00:00-05:00</published>
    <link href="http://arxiv.org/api/errors#incorrect_id_format_for_1234.12345v99" rel="alternate" type="text/html"/>
    <author><name>arXiv api core</name></author>
  </entry>"""


def arxiv_fault(status: int, retry_after: int | None = None) -> Reply:
    """arXiv's front end answers failures as short plain-text pages."""
    headers = {"Content-Type": "text/plain; charset=utf-8"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return Reply(status, {429: "Rate exceeded.", 403: "Access denied."}.get(status, f"Error {status}"), headers)


def arxiv_answer(seen: Seen) -> Reply:
    """The Atom API: honours ``max_results`` like arXiv does."""
    if seen.path != "/api/query":
        return Reply(404, "Not Found", {"Content-Type": "text/plain"})
    query = seen.param("search_query") or ""
    size = int(seen.param("max_results") or 10)
    entries = [_atom_entry(i, doc) for i, doc in enumerate(CORPUS[:size])]
    return Reply(200, arxiv_feed(entries, query, total=1234), {"Content-Type": "application/atom+xml; charset=utf-8"})


def wikipedia_fault(status: int, retry_after: int | None = None) -> Reply:
    """Wikimedia's edge answers HTTP failures with short HTML/plain pages."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    texts = {
        403: "Please set a user-agent and respect our robot policy https://w.wiki/4wJS. See also T400119.",
        429: "Too many requests (f061ab2)",
    }
    return Reply(status, texts.get(status, f"Wikimedia Error {status}"), headers)


def wikipedia_api_error(code: str, info: str, retry_after: int | None = None) -> Reply:
    """MediaWiki's in-band error: HTTP 200, ``{"error": {...}}``, and a ``MediaWiki-API-Error`` header."""
    headers = {"MediaWiki-API-Error": code}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = {
        "error": {"code": code, "info": info, "docref": "See https://en.wikipedia.org/w/api.php for API usage."},
        "servedby": "mw-api-ext.eqiad.main-7c9b6d8f5-abcde",
    }
    return Reply(200, body, headers)


def wikipedia_answer(seen: Seen) -> Reply:
    """``generator=search`` with extracts, in formatversion 2: pages come by page id, rank in ``index``."""
    if seen.path != "/w/api.php":
        return Reply(404, "Not Found")
    if seen.param("action") != "query" or seen.param("generator") != "search":
        return wikipedia_api_error("badvalue", 'Unrecognized value for parameter "action".')
    limit = int(seen.param("gsrlimit") or 10)
    pages = [
        {
            "pageid": 90_000 - rank * 1000,  # page ids run against the ranking, as they do for real
            "ns": 0,
            "title": doc.title,
            "index": rank + 1,
            "contentmodel": "wikitext",
            "pagelanguage": "en",
            "touched": "2024-03-04T10:00:00Z",
            "lastrevid": 1210000000 + rank,
            "length": 50_000,
            "fullurl": f"https://en.wikipedia.org/wiki/{doc.title.replace(' ', '_')}",
            "editurl": f"https://en.wikipedia.org/w/index.php?title={doc.title.replace(' ', '_')}&action=edit",
            "canonicalurl": f"https://en.wikipedia.org/wiki/{doc.title.replace(' ', '_')}",
            "extract": doc.content + "\n\nIt is a renewable energy source.",
            "revisions": [{"timestamp": f"{doc.date}T12:00:00Z"}],
        }
        for rank, doc in enumerate(CORPUS[:limit])
    ]
    pages.sort(key=lambda page: page["pageid"])
    body = {
        "batchcomplete": True,
        "continue": {"gsroffset": limit, "continue": "gsroffset||"},
        "query": {"pages": pages},
    }
    return Reply(200, body)


DDG_AD = """
<div class="result results_links results_links_deep result--ad ">
  <div class="links_main links_deep result__body">
    <h2 class="result__title"><a rel="nofollow" class="result__a"
      href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;ad_provider=bingv7aa">Cheap panels - Ad</a></h2>
    <a class="result__snippet"
      href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;ad_provider=bingv7aa">Buy now.</a>
  </div>
</div>"""


def _ddg_result(doc: Doc, wrapped: bool) -> str:
    href = f"//duckduckgo.com/l/?uddg={quote(doc.url, safe='')}&amp;rut=8f3a1c" if wrapped else doc.url
    title = doc.title.replace("power", "<b>power</b>")
    return f"""
<div class="result results_links results_links_deep web-result ">
  <div class="links_main links_deep result__body">
    <h2 class="result__title"><a rel="nofollow" class="result__a" href="{href}">{title}</a></h2>
    <div class="result__extras"><div class="result__extras__url">
      <span class="result__icon"><img class="result__icon__img" width="16" height="16" alt=""
        src="//external-content.duckduckgo.com/ip3/example.org.ico" name="i15" /></span>
      <a class="result__url" href="{href}">example.org</a>
    </div></div>
    <a class="result__snippet" href="{href}">{html.escape(doc.content).replace("sunlight", "<b>sunlight</b>")}</a>
    <div class="clear"></div>
  </div>
</div>"""


def ddg_page(docs: list[Doc], query: str, ad: bool = True) -> str:
    results = "".join(_ddg_result(doc, wrapped=i % 2 == 1) for i, doc in enumerate(docs))
    return f"""<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN">
<html><head><meta http-equiv="content-type" content="text/html; charset=UTF-8">
<title>{html.escape(query)} at DuckDuckGo</title></head>
<body class="body--html"><div id="links" class="results">{DDG_AD if ad else ""}{results}
<div class="nav-link"><form action="/html/" method="post"><input type="submit" class="btn btn--alt" value="Next" />
<input type="hidden" name="q" value="{html.escape(query)}" /><input type="hidden" name="s" value="10" /></form></div>
</div></body></html>"""


DDG_PAGE_SIZE = 3  # the fake's first page; later pages start at s=10, 25, ...


def ddg_answer(seen: Seen) -> Reply:
    """The HTML endpoint: a form POST with ``q``; ``s`` selects a later page."""
    if seen.method != "POST" or seen.path != "/html/":
        return Reply(404, "Not Found")
    form = seen.form()
    offset = int(form.get("s") or 0)
    start = 0 if offset == 0 else DDG_PAGE_SIZE + (offset - 10) // 15 * DDG_PAGE_SIZE
    return Reply(200, ddg_page(CORPUS[start : start + DDG_PAGE_SIZE], form.get("q", ""), ad=start == 0))


def ddg_fault(status: int, retry_after: int | None = None) -> Reply:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status, f"<html><body><h1>{status}</h1><p>If this error persists, please let us know.</p>", headers)


# ---------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One provider as the shared tests see it."""

    name: str  # the SEARCH_API value
    label: str  # how its messages name it
    answer: Callable[[Seen], Reply]
    fault: Callable[..., Reply]  # (status, retry_after=None) -> a realistic error reply
    env: Callable[[str], dict[str, str]]  # fake base URL -> settings
    sent_count: Callable[[Seen], Any]  # what the request said about max_results
    first: dict[str, Any]  # the first result, as mapped
    key_env: str | None = None  # set: the provider needs a key
    key_status: int = 401  # the status the provider sends for a bad key
    extra: dict[str, str] = field(default_factory=dict)


CASES = [
    Case(
        "brave", "Brave Search", brave_answer, brave_fault,
        lambda url: {"BRAVE_BASE_URL": f"{url}/res/v1", "BRAVE_SEARCH_API_KEY": KEY},
        lambda seen: seen.param("count"),
        {"title": "Solar power", "url": CORPUS[0].url, "published_date": "2024-03-01T08:00:00",
         "content": CORPUS[0].content + " Renewable & clean."},
        key_env="BRAVE_SEARCH_API_KEY", key_status=422,
    ),
    Case(
        "serper", "Serper", serper_answer, serper_fault,
        lambda url: {"SERPER_BASE_URL": url, "SERPER_API_KEY": KEY},
        lambda seen: str(seen.json()["num"]),
        {"title": "Solar power", "url": CORPUS[0].url, "content": CORPUS[0].content, "published_date": "Mar 1, 2024"},
        key_env="SERPER_API_KEY", key_status=403,
    ),
    Case(
        "searx", "SearxNG", searx_answer, searx_fault,
        lambda url: {"SEARX_HOST": url},
        lambda seen: "2",  # SearXNG has no count parameter: capping is the activity's
        {"title": "Solar power", "url": CORPUS[0].url, "content": CORPUS[0].content, "score": 4.0,
         "published_date": "2024-03-01T00:00:00"},
    ),
    Case(
        "arxiv", "arXiv", arxiv_answer, arxiv_fault,
        lambda url: {"ARXIV_BASE_URL": f"{url}/api/query"},
        lambda seen: seen.param("max_results"),
        {"title": "Solar power: a survey", "url": "http://arxiv.org/abs/2403.00001v1", "published_date": "2024-03-01",
         "content": "Authors: Author 0-0, Author 0-1, Author 0-2, Author 0-3, Author 0-4 et al. "
                    f"{CORPUS[0].content} More detail follows."},
    ),
    Case(
        "wikipedia", "Wikipedia", wikipedia_answer, wikipedia_fault,
        lambda url: {"WIKIPEDIA_BASE_URL": f"{url}/w/api.php"},
        lambda seen: seen.param("gsrlimit"),
        {"title": "Solar power", "url": "https://en.wikipedia.org/wiki/Solar_power",
         "content": CORPUS[0].content + " It is a renewable energy source.", "published_date": "2024-03-01T12:00:00Z"},
    ),
    Case(
        "duckduckgo", "DuckDuckGo", ddg_answer, ddg_fault,
        lambda url: {"DUCKDUCKGO_BASE_URL": f"{url}/html/"},
        lambda seen: "2",  # the HTML page has no count: capping is the activity's
        {"title": "Solar power", "url": CORPUS[0].url, "content": CORPUS[0].content},
    ),
]  # fmt: skip
BY_NAME = {case.name: case for case in CASES}
KEYED = [case for case in CASES if case.key_env]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


@pytest.fixture
def fake(case: Case) -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer(case.answer) as server:
        yield server


@pytest.fixture
def provider_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: Case, fake: FakeHTTPServer, loopback_only: LoopbackGuard
) -> dict[str, str]:
    """The settings (by env name) selecting the case's provider, pointed at its fake. Nothing may
    leak in from the machine: no conf.yaml, and no proxy (HTTP clients read those from the environment)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return {"DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "SEARCH_API": case.name, "SEARCH_TIMEOUT_SECONDS": "2",
            **case.env(fake.base_url)}


def use_setting(env: dict[str, str], name: str, value: str | None) -> None:
    if value is None:
        env.pop(name, None)
    else:
        env[name] = value


async def run_search(env: dict[str, str], query: str = "renewable energy", max_results: int = 2) -> SearchResponse:
    web_search = SearchActivities(load_settings(environ=env)).web_search
    return await ActivityEnvironment().run(web_search, SearchRequest(query=query, max_results=max_results))


async def search_error(env: dict[str, str], query: str = "renewable energy") -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await run_search(env, query)
    return caught.value


# ---------------------------------------------------------------- every provider


async def test_results_are_mapped_and_capped(provider_env: dict[str, str], case: Case, fake: FakeHTTPServer) -> None:
    response = await run_search(provider_env, "renewable energy", max_results=2)

    assert len(response.results) == 2
    first = response.results[0].model_dump(exclude_none=True)
    assert first == case.first
    assert response.results[1].url.startswith("http")
    assert response.results[1].url != response.results[0].url
    sent = fake.requests[0]
    assert "renewable energy" in (sent.param("q") or sent.param("search_query") or sent.param("gsrsearch") or "") + (
        sent.body.decode("utf-8", errors="replace").replace("+", " ")
    )
    assert case.sent_count(sent) == "2"


async def test_a_lone_surrogate_in_a_result_is_a_replacement_character(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, loopback_only: LoopbackGuard) -> None:
    """A provider's JSON may escape a lone surrogate; the results must still be carried (issue #42 §2)."""
    brave = BY_NAME["brave"]

    def answer(seen: Seen) -> Reply:
        reply = brave.answer(seen)
        for item in reply.body["web"]["results"]:
            item["title"], item["description"] = "Solar \ud800 power", "Sun \udfff light."
        return reply

    with FakeHTTPServer(answer) as fake:
        env = {"DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "SEARCH_API": "brave", **brave.env(fake.base_url)}
        response = SearchResponse.model_validate_json((await run_search(env)).model_dump_json())
    assert response.results[0].title == "Solar \ufffd power"
    assert response.results[0].content == "Sun \ufffd light. Renewable & clean."


async def test_content_is_capped(provider_env: dict[str, str], case: Case) -> None:
    use_setting(provider_env, "SEARCH_CONTENT_CHARS", "40")

    response = await run_search(provider_env, max_results=3)

    assert len(response.results) == 3
    for result in response.results:
        assert len(result.content) <= 40
        assert result.content.endswith("\u2026")


async def test_rate_limit_is_retryable_after_retry_after(
    provider_env: dict[str, str], case: Case, fake: FakeHTTPServer
) -> None:
    fake.inject(case.fault(429, retry_after=7))

    error = await search_error(provider_env)

    assert error.type == RATE_LIMITED
    assert not error.non_retryable
    assert error.next_retry_delay == timedelta(seconds=7)
    assert error.message.startswith(f"{case.label} rate limit reached (429)")


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retryable(
    provider_env: dict[str, str], case: Case, fake: FakeHTTPServer, status: int
) -> None:
    fake.inject(case.fault(status))

    error = await search_error(provider_env)

    assert error.type == UNAVAILABLE
    assert not error.non_retryable
    assert error.message.startswith(f"{case.label} is unavailable ({status})")


@pytest.mark.parametrize("status", [401, 403])
async def test_unauthorized_and_forbidden_are_not_retryable(
    provider_env: dict[str, str], case: Case, fake: FakeHTTPServer, status: int
) -> None:
    fake.inject(case.fault(status))

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR
    assert error.non_retryable
    assert error.message.startswith(case.label)
    assert f"({status}" in error.message
    if case.key_env:
        assert case.key_env in error.message
    else:
        assert "API key" not in error.message  # keyless providers must not blame a key


async def test_bad_request_is_not_retryable(provider_env: dict[str, str], case: Case, fake: FakeHTTPServer) -> None:
    fake.inject(case.fault(400))

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert error.message.startswith(case.label) and "(400" in error.message


@pytest.mark.parametrize("case", KEYED, ids=[case.name for case in KEYED], indirect=True)
async def test_wrong_key_is_rejected_clearly(
    provider_env: dict[str, str], case: Case
) -> None:
    assert case.key_env is not None
    use_setting(provider_env, case.key_env, "wrong-key")

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert error.message.startswith(f"{case.label} rejected the API key ({case.key_status}):")
    assert error.message.endswith(f"Check {case.key_env}.")


@pytest.mark.parametrize(
    ("case", "required"),
    [
        (BY_NAME["brave"], "BRAVE_SEARCH_API_KEY"),
        (BY_NAME["serper"], "SERPER_API_KEY"),
        (BY_NAME["searx"], "SEARX_HOST"),
    ],
    ids=["brave", "serper", "searx"],
    indirect=["case"],
)
async def test_missing_key_or_host_is_a_config_error(
    provider_env: dict[str, str], case: Case, required: str, fake: FakeHTTPServer
) -> None:
    use_setting(provider_env, required, None)

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert required in error.message and case.label in error.message
    assert fake.requests == []


async def test_timeout_is_retryable(
    provider_env: dict[str, str], case: Case, fake: FakeHTTPServer
) -> None:
    use_setting(provider_env, "SEARCH_TIMEOUT_SECONDS", "0.3")
    fake.inject(Reply(200, "late", delay=3))

    error = await search_error(provider_env)

    assert error.type == UNAVAILABLE and not error.non_retryable
    assert "0.3 s" in error.message


async def test_unreachable_server_is_retryable(
    provider_env: dict[str, str], case: Case
) -> None:
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in case.env(f"http://127.0.0.1:{port}").items():
        use_setting(provider_env, name, value)

    error = await search_error(provider_env)

    assert error.type == UNAVAILABLE and not error.non_retryable
    assert case.label in error.message


# ---------------------------------------------------------------- provider particulars


@pytest.mark.parametrize("case", [BY_NAME["brave"]], ids=["brave"], indirect=True)
async def test_brave_rate_limit_without_retry_after_uses_the_reset_header(
    provider_env: dict[str, str], fake: FakeHTTPServer
) -> None:
    fake.inject(brave_fault(429))  # X-RateLimit-Reset: "1, 2591000", no Retry-After

    error = await search_error(provider_env)

    assert error.type == RATE_LIMITED and error.next_retry_delay == timedelta(seconds=1)


@pytest.mark.parametrize("case", [BY_NAME["brave"]], ids=["brave"], indirect=True)
async def test_brave_validation_error_is_not_blamed_on_the_key(
    provider_env: dict[str, str], fake: FakeHTTPServer
) -> None:
    fake.inject(brave_fault(422))

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    expected = "Brave Search rejected the request as invalid (422): Unable to validate request parameter(s)."
    assert error.message == expected


@pytest.mark.parametrize("case", [BY_NAME["brave"]], ids=["brave"], indirect=True)
async def test_brave_sends_the_token_header(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    await run_search(provider_env)

    assert fake.requests[0].headers["x-subscription-token"] == KEY
    assert fake.requests[0].path == "/res/v1/web/search"


@pytest.mark.parametrize("case", [BY_NAME["searx"]], ids=["searx"], indirect=True)
async def test_searx_forbidden_names_the_json_format(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    fake.inject(searx_fault(403))

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert "settings.yml" in error.message and "json" in error.message
    assert "You don't have the permission" in error.message  # the instance's own words, unescaped


@pytest.mark.parametrize("case", [BY_NAME["searx"]], ids=["searx"], indirect=True)
async def test_searx_with_every_engine_down_is_retryable(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    fake.inject(Reply(200, {"query": "x", "results": [], "unresponsive_engines": [["google", "timeout"]]}))

    error = await search_error(provider_env)

    assert error.type == UNAVAILABLE and "google timeout" in error.message


@pytest.mark.parametrize("case", [BY_NAME["searx"]], ids=["searx"], indirect=True)
async def test_searx_host_without_scheme_is_a_config_error(
    provider_env: dict[str, str]
) -> None:
    use_setting(provider_env, "SEARX_HOST", "localhost:8080")

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and "SEARX_HOST" in error.message


@pytest.mark.parametrize("case", [BY_NAME["serper"]], ids=["serper"], indirect=True)
async def test_serper_sends_key_and_json_body(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    await run_search(provider_env, max_results=4)

    sent = fake.requests[0]
    assert sent.method == "POST" and sent.headers["x-api-key"] == KEY
    assert sent.json() == {"q": "renewable energy", "num": 4}


@pytest.mark.parametrize("case", [BY_NAME["wikipedia"]], ids=["wikipedia"], indirect=True)
async def test_wikipedia_orders_by_search_rank_not_page_id(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    response = await run_search(provider_env, max_results=5)

    assert [result.title for result in response.results] == [doc.title for doc in CORPUS]
    sent = fake.requests[0]
    assert sent.param("prop") == "extracts|info|revisions" and sent.param("explaintext") == "1"
    assert sent.headers["user-agent"].startswith("deerflow-temporal/")


@pytest.mark.parametrize("case", [BY_NAME["wikipedia"]], ids=["wikipedia"], indirect=True)
async def test_wikipedia_maxlag_is_a_rate_limit(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    fake.inject(wikipedia_api_error("maxlag", "Waiting for 10.64.48.35: 1.5 seconds lagged.", retry_after=5))

    error = await search_error(provider_env)

    assert error.type == RATE_LIMITED and error.next_retry_delay == timedelta(seconds=5)


@pytest.mark.parametrize("case", [BY_NAME["wikipedia"]], ids=["wikipedia"], indirect=True)
async def test_wikipedia_in_band_error_is_not_retryable(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    fake.inject(wikipedia_api_error("badvalue", 'Unrecognized value for parameter "gsrnamespace": x.'))

    error = await search_error(provider_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert error.message.startswith("Wikipedia rejected the request (badvalue)")


def test_wikipedia_language_picks_the_edition() -> None:
    assert WikipediaSearch(Settings(WIKIPEDIA_LANG="de")).api_url() == "https://de.wikipedia.org/w/api.php"
    assert WikipediaSearch(Settings()).api_url() == "https://en.wikipedia.org/w/api.php"
    with pytest.raises(ApplicationError) as caught:
        WikipediaSearch(Settings(WIKIPEDIA_LANG="evil.example/x?")).api_url()
    assert caught.value.type == CONFIG_ERROR and "WIKIPEDIA_LANG" in caught.value.message


@pytest.mark.parametrize("case", [BY_NAME["arxiv"]], ids=["arxiv"], indirect=True)
async def test_arxiv_skips_error_entries(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    feed = arxiv_feed([ARXIV_ERROR_ENTRY, _atom_entry(0, CORPUS[0])], "x", total=2)
    fake.inject(Reply(200, feed, {"Content-Type": "application/atom+xml; charset=utf-8"}))

    response = await run_search(provider_env, max_results=3)

    assert [result.url for result in response.results] == ["http://arxiv.org/abs/2403.00001v1"]


@pytest.mark.parametrize("case", [BY_NAME["arxiv"]], ids=["arxiv"], indirect=True)
async def test_arxiv_unreadable_answer_is_retryable(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    fake.inject(Reply(200, "<html><body>Service temporarily unavailable</body></html>"))

    error = await search_error(provider_env)

    assert error.type == UNAVAILABLE and "unreadable" in error.message


@pytest.mark.parametrize("case", [BY_NAME["duckduckgo"]], ids=["duckduckgo"], indirect=True)
async def test_duckduckgo_unwraps_links_drops_ads_and_pages_on(
    provider_env: dict[str, str], fake: FakeHTTPServer
) -> None:
    response = await run_search(provider_env, max_results=5)

    assert [result.url for result in response.results] == [doc.url for doc in CORPUS]
    assert all("duckduckgo.com" not in result.url for result in response.results)
    forms = [seen.form() for seen in fake.requests]
    assert [form.get("s") for form in forms] == [None, "10"]
    assert forms[0]["q"] == "renewable energy"


@pytest.mark.parametrize("case", [BY_NAME["duckduckgo"]], ids=["duckduckgo"], indirect=True)
async def test_duckduckgo_202_ratelimit_page_is_a_rate_limit(
    provider_env: dict[str, str], fake: FakeHTTPServer
) -> None:
    fake.inject(Reply(202, "<html><body>Ratelimit</body></html>"))

    error = await search_error(provider_env)

    assert error.type == RATE_LIMITED and not error.non_retryable
    assert "202" in error.message


# ---------------------------------------------------------------- kept clients


def tavily_answer(seen: Seen) -> Reply:
    """Tavily's ``POST /search``, as much of it as the mapping reads; sets a cookie, as fronts do."""
    results = [{"title": doc.title, "url": doc.url, "content": doc.content, "score": 0.9} for doc in CORPUS]
    return Reply(200, {"query": seen.json()["query"], "results": results}, {"Set-Cookie": "session=abc; Path=/"})


TAVILY = Case("tavily", "Tavily", tavily_answer, lambda status, retry_after=None: Reply(status),
              lambda url: {"TAVILY_BASE_URL": url, "TAVILY_API_KEY": KEY}, lambda seen: seen.json()["max_results"],
              {}, key_env="TAVILY_API_KEY")
# The providers whose requests go through httpx (activities/support/pooled_http.py); arXiv and
# DuckDuckGo go through their own libraries' clients.
KEPT = [TAVILY, *(BY_NAME[name] for name in ("brave", "serper", "searx", "wikipedia"))]


def with_cookie(answer: Callable[[Seen], Reply]) -> Callable[[Seen], Reply]:
    def answered(seen: Seen) -> Reply:
        reply = answer(seen)
        return Reply(reply.status, reply.body, {**reply.headers, "Set-Cookie": "session=abc; Path=/"})
    return answered


@pytest.mark.parametrize("case", KEPT, ids=[case.name for case in KEPT], indirect=True)
async def test_searches_reuse_the_connection_and_send_no_cookie_back(
    provider_env: dict[str, str], case: Case, fake: FakeHTTPServer
) -> None:
    """A client per search opened a connection (to a real provider, a TLS handshake) per search."""
    fake.handler = with_cookie(case.answer)

    for _ in range(3):
        await run_search(provider_env)

    assert len(fake.requests) >= 3
    assert len({seen.client_port for seen in fake.requests}) == 1
    # A kept client must not carry one run's provider cookies into the next search, of any run.
    assert all("cookie" not in seen.headers for seen in fake.requests)


@pytest.mark.parametrize("case", KEPT, ids=[case.name for case in KEPT], indirect=True)
def test_each_event_loop_searches_on_its_own_client(provider_env: dict[str, str], fake: FakeHTTPServer) -> None:
    """A client's connections belong to the loop that opened them: a second loop (a process that
    calls ``asyncio.run`` twice) must not be handed the first one's."""
    for _ in range(2):
        response = asyncio.run(run_search(provider_env))
        assert len(response.results) == 2
    assert len({seen.client_port for seen in fake.requests}) == 2


# ---------------------------------------------------------------- registry and guard


@pytest.mark.usefixtures("loopback_only")
def test_unknown_provider_is_refused_at_start_listing_every_supported_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "SEARCH_API": "altavista"})

    for name in ("tavily", "duckduckgo", "brave", "serper", "searx", "arxiv", "wikipedia"):
        assert name in str(caught.value)
    # The names checked at start are exactly the registered providers.
    assert set(supported_providers()) == set(SEARCH_APIS) == {
        "tavily", "duckduckgo", "brave", "serper", "searx", "arxiv", "wikipedia"}


def test_loopback_predicate() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.10") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("api.search.brave.com") and not is_loopback("10.0.0.1") and not is_loopback(None)


def test_guard_refuses_before_any_lookup_or_connection(
    loopback_only: LoopbackGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard must stop a public name before the real resolver or socket sees it. The real
    functions are swapped for recorders, so even a broken guard sends nothing anywhere."""
    reached: list[str] = []
    monkeypatch.setitem(fake_http.REAL, "getaddrinfo", lambda *args, **kwargs: reached.append("dns"))
    monkeypatch.setitem(fake_http.REAL, "connect", lambda *args, **kwargs: reached.append("connect"))

    monkeypatch.setitem(fake_http.REAL, "gethostbyname", lambda *args, **kwargs: reached.append("dns"))
    with pytest.raises(OSError, match="loopback guard"):
        socket.getaddrinfo("api.search.brave.com", 443)
    with pytest.raises(OSError, match="loopback guard"):
        socket.gethostbyname("export.arxiv.org")
    with socket.socket() as sock, pytest.raises(OSError, match="loopback guard"):
        sock.connect(("192.0.2.1", 443))

    assert reached == []
    assert len(loopback_only.violations) == 3
    loopback_only.violations.clear()  # seen and expected: let the fixture's own check pass
