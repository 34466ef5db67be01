"""The ``web_search`` activity against the offline Tavily fake, through the real tavily-python client.

Why this way: the error sorting depends on how tavily-python reports each HTTP failure, so the
tests drive the genuine client over loopback rather than mocking it; a mock would only test our
assumptions about the client.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.web.search import (
    CONFIG_ERROR,
    RATE_LIMITED,
    UNAVAILABLE,
    SearchActivities,
    cap_text,
    parse_retry_after,
)
from config.settings import ConfigError, load_settings
from offline.search_server import FakeSearchServer, Fault
from workflows.contracts.tool_activities import SearchRequest, SearchResponse

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer() as fake:
        yield fake


@pytest.fixture
def search_env(monkeypatch: pytest.MonkeyPatch, server: FakeSearchServer, tmp_path: Path) -> dict[str, str]:
    """The settings (by env name) that point at the fake; no conf.yaml and no proxy may leak in
    from the machine (the HTTP client reads proxies from the environment)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return {"DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "SEARCH_API": "tavily", "TAVILY_API_KEY": "offline",
            "TAVILY_BASE_URL": server.base_url, "SEARCH_TIMEOUT_SECONDS": "2"}


def use_setting(env: dict[str, str], name: str, value: str) -> None:
    env[name] = value


async def run_search(env: dict[str, str], query: str, max_results: int = 3) -> SearchResponse:
    web_search = SearchActivities(load_settings(environ=env)).web_search
    return await ActivityEnvironment().run(web_search, SearchRequest(query=query, max_results=max_results))


async def search_error(env: dict[str, str], query: str = "solar power") -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await run_search(env, query)
    return caught.value


def slug(url: str) -> str:
    return url.rsplit("/", 1)[-1]


# ---------------------------------------------------------------- results


async def test_results_are_ranked_and_capped_to_max_results(
    search_env: dict[str, str], server: FakeSearchServer
) -> None:
    response = await run_search(search_env, "how do lithium-ion batteries work", max_results=2)

    assert len(response.results) == 2
    assert slug(response.results[0].url) == "lithium-ion-batteries"
    scores = [result.score or 0.0 for result in response.results]
    assert scores == sorted(scores, reverse=True)
    sent = server.requests[-1]
    assert sent["path"] == "/search"
    assert sent["headers"]["Authorization"] == "Bearer offline"
    assert sent["body"]["max_results"] == 2
    assert sent["body"]["include_raw_content"] is False


async def test_content_is_capped(search_env: dict[str, str]) -> None:
    use_setting(search_env, "SEARCH_CONTENT_CHARS", "60")

    response = await run_search(search_env, "electric vehicles charging", max_results=3)

    assert response.results
    for result in response.results:
        assert len(result.content) <= 60
        assert result.content.endswith("\u2026")
        assert result.raw_content is None


async def test_chinese_query_finds_the_chinese_document(search_env: dict[str, str]) -> None:
    response = await run_search(search_env, "熬夜对健康有什么影响")

    assert slug(response.results[0].url) == "staying-up-late-health-zh"
    assert "熬夜" in response.results[0].content


# ---------------------------------------------------------------- errors


async def test_server_error_is_retryable(search_env: dict[str, str], server: FakeSearchServer) -> None:
    server.inject(500)

    error = await search_error(search_env)

    assert error.type == UNAVAILABLE
    assert not error.non_retryable
    assert "500" in error.message


async def test_rate_limit_is_retryable_after_retry_after(search_env: dict[str, str], server: FakeSearchServer) -> None:
    server.inject(Fault.rate_limited(retry_after=7))

    error = await search_error(search_env)

    assert error.type == RATE_LIMITED
    assert not error.non_retryable
    assert error.next_retry_delay == timedelta(seconds=7)


async def test_rejected_key_is_not_retryable(search_env: dict[str, str]) -> None:
    use_setting(search_env, "TAVILY_API_KEY", "wrong-key")

    error = await search_error(search_env)

    assert error.type == CONFIG_ERROR
    assert error.non_retryable
    assert error.message.startswith("Tavily rejected the API key (401)")
    assert "TAVILY_API_KEY" in error.message


async def test_missing_key_is_not_retryable(search_env: dict[str, str], server: FakeSearchServer) -> None:
    del search_env["TAVILY_API_KEY"]

    error = await search_error(search_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert "TAVILY_API_KEY" in error.message
    assert server.requests == []


@pytest.mark.parametrize(
    ("status", "cause"),
    [(400, "invalid (400)"), (403, "refused the request (403"), (432, "usage limit")],
)
async def test_refusals_are_not_retryable(
    search_env: dict[str, str], server: FakeSearchServer, status: int, cause: str
) -> None:
    server.inject(status)

    error = await search_error(search_env)

    assert error.type == CONFIG_ERROR and error.non_retryable
    assert cause in error.message


async def test_timeout_is_retryable(search_env: dict[str, str], server: FakeSearchServer) -> None:
    use_setting(search_env, "SEARCH_TIMEOUT_SECONDS", "0.3")
    server.inject(Fault.timeout(5))

    started = time.monotonic()
    error = await search_error(search_env)

    assert time.monotonic() - started < 3
    assert error.type == UNAVAILABLE and not error.non_retryable
    assert "0.3 s" in error.message


async def test_unreachable_server_is_retryable(search_env: dict[str, str]) -> None:
    with FakeSearchServer() as gone:
        url = gone.base_url
    use_setting(search_env, "TAVILY_BASE_URL", url)

    error = await search_error(search_env)

    assert error.type == UNAVAILABLE and not error.non_retryable


def test_an_unknown_provider_is_refused_at_start(search_env: dict[str, str]) -> None:
    # Before: accepted at start, then every search of every run failed with a config error.
    use_setting(search_env, "SEARCH_API", "altavista")

    with pytest.raises(ConfigError) as caught:
        load_settings(environ=search_env)

    [line] = caught.value.problems
    assert line.startswith("SEARCH_API='altavista': ") and "tavily" in line


async def test_deerflows_domain_filters_reach_tavily(search_env: dict[str, str], server: FakeSearchServer,
                                                      tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text("SEARCH_ENGINE:\n  engine: tavily\n  include_domains: [example.org]\n"
                    "  exclude_domains:\n    - spam.example\n")
    use_setting(search_env, "DEERFLOW_CONF", str(conf))

    await run_search(search_env, "solar power")

    sent = server.requests[-1]["body"]
    assert (sent["include_domains"], sent["exclude_domains"]) == (["example.org"], ["spam.example"])


async def test_faults_are_consumed_in_order(search_env: dict[str, str], server: FakeSearchServer) -> None:
    server.inject(503, Fault.rate_limited(2))

    assert (await search_error(search_env)).type == UNAVAILABLE
    assert (await search_error(search_env)).type == RATE_LIMITED
    assert (await run_search(search_env, "solar power")).results


# ---------------------------------------------------------------- helpers and the fake itself


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("12", now) == timedelta(seconds=12)
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now) == timedelta(seconds=30)
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


def test_cap_text_marks_the_cut() -> None:
    assert cap_text("short", 10) == "short"
    assert cap_text("a longer sentence", 8) == "a longe\u2026"
    assert len(cap_text("x" * 100, 10)) == 10


def test_fake_speaks_tavily_errors(server: FakeSearchServer) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        missing = http.post("/search", json={"query": "solar"})
        good = http.post("/search", json={"query": "solar"}, headers={"Authorization": "Bearer offline"})
        health = http.get("/health")

    assert missing.status_code == 401
    assert missing.json() == {"detail": {"error": "Unauthorized: missing or invalid API key."}}
    assert good.status_code == 200
    assert {"query", "results", "response_time", "images", "answer"} <= good.json().keys()
    assert health.json()["status"] == "ok"


async def test_empty_search_api_means_the_default_provider(search_env: dict[str, str]) -> None:
    use_setting(search_env, "SEARCH_API", "")

    assert (await run_search(search_env, "wind turbines offshore")).results
