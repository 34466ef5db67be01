"""DuckDuckGo (``SEARCH_API=duckduckgo``) through ``ddgs``, the maintained successor of duckduckgo-search.

No key is needed: ``ddgs`` posts the query to DuckDuckGo's JavaScript-free HTML page and parses
the result list. Two things keep it predictable here:

* Only ddgs' ``duckduckgo`` engine is used, not the ``DDGS`` metasearch front: ``DDGS`` spreads a
  query over randomly chosen engines (Bing, Google, Yandex ...) and silently falls back to all of
  them when the one asked for is missing, which would make ``SEARCH_API=duckduckgo`` mean
  "any engine".
* ddgs' engines turn every non-200 answer into "no results", which would hide rate limits and
  blocks. ``_Engine.request`` keeps the status instead, so a 429 or DuckDuckGo's 202 rate-limit
  page becomes ``SearchRateLimited`` and a 403 block a ``SearchConfigError``.

``DDGS_PROXY`` (a setting, under ddgs' own variable name) routes the requests through a proxy;
``DUCKDUCKGO_BASE_URL`` moves the HTML endpoint (tests point it at a loopback fake).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import unquote, urlsplit

import primp
from ddgs.engines.duckduckgo import Duckduckgo
from ddgs.exceptions import DDGSException
from ddgs.exceptions import TimeoutException as DDGSTimeout
from ddgs.results import TextResult
from temporalio.exceptions import ApplicationError

from activities.web.search import config_error, rate_limited_error, register_provider, status_error, unavailable_error
from activities.web.search_providers._http import plain_text
from config.settings import Settings
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

LABEL = "DuckDuckGo"
REGION = "wt-wt"  # "no region", DeerFlow's (LangChain's) default
MAX_PAGES = 3  # the HTML page lists ~10 results, later pages ~15: 3 pages cover max_results=20
_REDIRECT_RE = re.compile(r"^(?:https?:)?//duckduckgo\.com/l/\?")


class _Refused(Exception):
    """A non-200 answer from DuckDuckGo, kept whole so it can be sorted."""

    def __init__(self, status: int, headers: dict[str, str], text: str) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.text = text


class _Engine(Duckduckgo):
    """ddgs' DuckDuckGo HTML engine, but a non-200 answer raises instead of reading as "no results"."""

    def request(self, *args: Any, **kwargs: Any) -> str | None:
        response = self.http_client.request(*args, **kwargs)
        if response.status_code == 200:
            return response.text
        raw = getattr(response, "_resp", None)  # ddgs' wrapper drops the headers; primp's response has them
        headers = {str(k).lower(): str(v) for k, v in dict(getattr(raw, "headers", None) or {}).items()}
        raise _Refused(response.status_code, headers, response.text or "")


@register_provider("duckduckgo")
class DuckDuckGoSearch:
    """Pages of DuckDuckGo's HTML results, parsed by ddgs, until ``max_results`` are in."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def search(self, request: SearchRequest) -> SearchResponse:
        """ddgs is synchronous (primp underneath), so it runs in a worker thread."""
        try:
            items = await asyncio.to_thread(self._search_sync, request.query, max(request.max_results, 1))
        except ApplicationError:
            raise
        except Exception as exc:
            error = duckduckgo_error(exc, self._settings.search_timeout_seconds)
            if error is None:
                raise
            raise error from exc
        return duckduckgo_response(request.query, items)

    def _engine(self) -> _Engine:
        try:
            engine = _Engine(proxy=self._settings.ddgs_proxy, timeout=self._settings.search_timeout_seconds)
        except primp.BuilderError as exc:  # e.g. a malformed DDGS_PROXY
            raise config_error(f"DuckDuckGo's HTTP client could not be set up (check DDGS_PROXY): {exc}") from exc
        base_url = self._settings.duckduckgo_base_url
        if base_url:
            parts = urlsplit(base_url.strip())
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise config_error(f"DUCKDUCKGO_BASE_URL={base_url!r} is not an http(s) URL.")
            engine.search_url = base_url.strip()
        return engine

    def _search_sync(self, query: str, max_results: int) -> list[TextResult]:
        engine = self._engine()
        seen: dict[str, TextResult] = {}
        for page in range(1, MAX_PAGES + 1):
            batch = engine.search(query, region=REGION, safesearch="moderate", page=page) or []
            fresh = [item for item in batch if item.href and item.href not in seen]
            seen.update((item.href, item) for item in fresh)
            if not fresh or len(seen) >= max_results:
                break
        return list(seen.values())


def _target_url(href: str) -> str:
    """DuckDuckGo may wrap links in its ``/l/?uddg=<target>&rut=...`` redirector; unwrap them."""
    if not _REDIRECT_RE.match(href):
        return href
    target = href.split("uddg=", 1)[1] if "uddg=" in href else ""
    return unquote(target.split("&rut=", 1)[0]) or href


def duckduckgo_response(query: str, items: list[TextResult]) -> SearchResponse:
    """ddgs' ``TextResult`` (title, href, body) to our contract; DuckDuckGo gives no score or date."""
    results = []
    for item in items:
        url = _target_url(item.href)
        if not url.startswith(("http://", "https://")):
            continue
        results.append(SearchResult(title=plain_text(item.title) or url, url=url, content=plain_text(item.body)))
    return SearchResponse(query=query, results=results)


def duckduckgo_error(exc: Exception, timeout: float) -> ApplicationError | None:
    """Sort a ddgs/primp failure into our three types; ``None`` for the unknown."""
    if isinstance(exc, _Refused):
        if exc.status == 202:  # DuckDuckGo's "too many requests" page (what ddgs calls "202 Ratelimit")
            return rate_limited_error("DuckDuckGo rate limit reached (202 Ratelimit page).", None)
        hints = {403: "DuckDuckGo blocks some networks; set DDGS_PROXY or pick another SEARCH_API."}
        return status_error(
            LABEL,
            exc.status,
            plain_text(exc.text)[:300],
            retry_after=exc.headers.get("retry-after"),
            base_url_env="DUCKDUCKGO_BASE_URL",
            hints=hints,
        )
    if isinstance(exc, DDGSTimeout | primp.TimeoutError):
        return unavailable_error(f"DuckDuckGo did not answer within {timeout:g} s.")
    if isinstance(exc, DDGSException):  # ddgs wraps every primp transport failure in it
        return unavailable_error(f"Could not reach DuckDuckGo: {exc}")
    return None
