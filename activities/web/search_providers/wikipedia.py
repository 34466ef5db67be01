"""Wikipedia (``SEARCH_API=wikipedia``): the MediaWiki Action API, called with httpx.

One request does search and extracts together: ``action=query&generator=search`` ranks the
pages (each carries its rank as ``index``) and ``prop=extracts|info|revisions`` adds each page's
plain-text lead section, URL and last edit time.

The ``wikipedia`` PyPI package is deliberately not used: it has been unmaintained since 2014,
makes one request per page, sends no timeout and hides HTTP failures behind its own exceptions.

MediaWiki reports most failures as HTTP 200 with ``{"error": {"code", "info"}}``; those are
sorted here too (``maxlag``/``ratelimited`` are rate limits, ``readonly`` is transient, the rest
mean the request itself is wrong).
"""

from __future__ import annotations

import re
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.web.search import (
    config_error,
    parse_retry_after,
    rate_limited_error,
    register_provider,
    unavailable_error,
)
from activities.web.search_providers._http import (
    HttpProvider,
    check_base_url,
    http_error,
    json_object,
    send,
    str_or_none,
)
from config.settings import Settings
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

WIKIPEDIA_MAX_RESULTS = 20  # TextExtracts returns intro extracts for at most 20 pages at once
_LANG_RE = re.compile(r"^[a-z][a-z0-9-]{1,19}$")  # "en", "zh", "zh-yue", "simple", "be-tarask"
_RATE_LIMIT_CODES = frozenset({"maxlag", "ratelimited"})
_TRANSIENT_CODES = frozenset({"readonly"})  # and every internal_api_error_*
PROVIDER = HttpProvider("Wikipedia", base_url_env="WIKIPEDIA_BASE_URL")


@register_provider("wikipedia")
class WikipediaSearch:
    """One MediaWiki ``action=query`` request per query."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def api_url(self) -> str:
        """``WIKIPEDIA_BASE_URL``, else the ``WIKIPEDIA_LANG`` edition's ``/w/api.php``."""
        if self._settings.wikipedia_base_url:
            return check_base_url(PROVIDER, self._settings.wikipedia_base_url)
        lang = self._settings.wikipedia_lang.strip().lower() or "en"
        if not _LANG_RE.match(lang):
            raise config_error(f"WIKIPEDIA_LANG={lang!r} is not a Wikipedia language code (e.g. en, de, zh).")
        return f"https://{lang}.wikipedia.org/w/api.php"

    async def search(self, request: SearchRequest) -> SearchResponse:
        """Search plus extracts in one request; pages come back in search rank order."""
        limit = min(max(request.max_results, 1), WIKIPEDIA_MAX_RESULTS)
        response = await send(
            PROVIDER,
            "GET",
            self.api_url(),
            timeout=self._settings.search_timeout_seconds,
            follow_redirects=True,  # no key to leak
            params={
                "action": "query",
                "format": "json",
                "formatversion": "2",
                "generator": "search",
                "gsrsearch": request.query,
                "gsrlimit": limit,
                "gsrnamespace": 0,
                "prop": "extracts|info|revisions",
                "exintro": 1,
                "explaintext": 1,
                "exlimit": limit,
                "inprop": "url",
                "rvprop": "timestamp",
            },
        )
        if response.status_code != 200:
            raise http_error(PROVIDER, response)
        payload = json_object(PROVIDER, response)
        if isinstance(payload.get("error"), dict):
            raise api_error(payload["error"], response.headers.get("Retry-After"))
        return wikipedia_response(request.query, payload)


def wikipedia_response(query: str, payload: dict[str, Any]) -> SearchResponse:
    """``query.pages[]`` (formatversion 2) to our contract, ordered by search rank."""
    block = payload.get("query")
    pages = block.get("pages") if isinstance(block, dict) else None
    ranked = sorted(
        (page for page in pages or [] if isinstance(page, dict) and page.get("fullurl") and not page.get("missing")),
        key=lambda page: page.get("index") if isinstance(page.get("index"), int) else 1_000_000,
    )
    results = []
    for page in ranked:
        revisions = page.get("revisions")
        edited = revisions[0].get("timestamp") if isinstance(revisions, list) and revisions else None
        results.append(
            SearchResult(
                title=str(page.get("title") or page["fullurl"]),
                url=str(page["fullurl"]),
                content=" ".join(str(page.get("extract") or "").split()),
                published_date=str_or_none(edited),
            )
        )
    return SearchResponse(query=query, results=results)


def api_error(error: dict[str, Any], retry_after: str | None) -> ApplicationError:
    """Sort a MediaWiki ``{"error": {"code", "info"}}`` answer."""
    code = str(error.get("code") or "unknown")
    info = str(error.get("info") or "").strip()
    message = f"Wikipedia API error {code}" + (f": {info}" if info else "")
    if code in _RATE_LIMIT_CODES:
        return rate_limited_error(f"{message} (rate limited).", parse_retry_after(retry_after))
    if code in _TRANSIENT_CODES or code.startswith("internal_api_error"):
        return unavailable_error(f"{message}.")
    detail = info or "no detail given"
    return config_error(f"Wikipedia rejected the request ({code}): {detail}. Check WIKIPEDIA_BASE_URL.")
