"""Brave Search (``SEARCH_API=brave``): the Web Search API over plain HTTP with httpx.

``GET {BRAVE_BASE_URL}/web/search?q=&count=`` with ``X-Subscription-Token``. There is no
maintained official Python client, and the API is one GET, so httpx is used directly.

Brave answers a bad token with 422 ``SUBSCRIPTION_TOKEN_INVALID`` rather than 401, and a rate
limit with ``X-RateLimit-Reset`` rather than ``Retry-After``; both are handled here so they sort
like every other provider's.
"""

from __future__ import annotations

from typing import Any

import httpx

from activities.web.search import missing_setting_error, register_provider, status_error
from activities.web.search_providers._http import (
    Call,
    HttpProvider,
    JsonSearch,
    plain_text,
    response_detail,
    str_or_none,
)
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

DEFAULT_BASE_URL = "https://api.search.brave.com/res/v1"
BRAVE_MAX_COUNT = 20  # the API rejects larger counts
PROVIDER = HttpProvider("Brave Search", base_url_env="BRAVE_BASE_URL", key_env="BRAVE_SEARCH_API_KEY")


@register_provider("brave")
class BraveSearch(JsonSearch):
    """One Brave Web Search request per query: ``GET /web/search``; results come from ``web.results``."""

    provider = PROVIDER

    def api_key(self) -> str:
        if not self._settings.brave_search_api_key:
            raise missing_setting_error(PROVIDER.label, "BRAVE_SEARCH_API_KEY")
        return self._settings.brave_search_api_key

    def base_url(self) -> str:
        return self._settings.brave_base_url or DEFAULT_BASE_URL

    def call(self, request: SearchRequest, api_key: str) -> Call:
        return Call("GET", "/web/search", {
            "params": {"q": request.query, "count": min(max(request.max_results, 1), BRAVE_MAX_COUNT)},
            "headers": {"X-Subscription-Token": api_key},
        })

    def parse(self, query: str, payload: dict[str, Any]) -> SearchResponse:
        return brave_response(query, payload)

    def error(self, response: httpx.Response) -> Exception:
        return brave_error(response)


def brave_response(query: str, payload: dict[str, Any]) -> SearchResponse:
    """``web.results[]`` to our contract; description and extra snippets make the content."""
    web = payload.get("web")
    items = web.get("results") if isinstance(web, dict) else None
    results = []
    for item in items or []:
        if not isinstance(item, dict) or not item.get("url"):
            continue
        snippets = [item.get("description"), *(item.get("extra_snippets") or [])]
        results.append(
            SearchResult(
                title=plain_text(item.get("title")) or str(item["url"]),
                url=str(item["url"]),
                content=" ".join(text for text in map(plain_text, snippets) if text),
                published_date=str_or_none(item.get("page_age")) or str_or_none(item.get("age")),
            )
        )
    query_info = payload.get("query")
    original = query_info.get("original") if isinstance(query_info, dict) else None
    return SearchResponse(query=str(original or query), results=results)


def brave_error(response: httpx.Response) -> Exception:
    """Brave's error body is ``{"type": "ErrorResponse", "error": {"code", "detail", ...}}``."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    code = str(error.get("code") or "") if isinstance(error, dict) else ""
    return status_error(
        PROVIDER.label,
        response.status_code,
        response_detail(response),
        retry_after=response.headers.get("Retry-After") or _reset_seconds(response),
        key_env=PROVIDER.key_env,
        key_rejected="TOKEN" in code.upper(),
        base_url_env=PROVIDER.base_url_env,
    )


def _reset_seconds(response: httpx.Response) -> str | None:
    """``X-RateLimit-Reset: 1, 1419704`` lists seconds until each window resets; the first one
    (the per-second window) is when a retry can succeed."""
    value = response.headers.get("X-RateLimit-Reset")
    first = value.split(",")[0].strip() if value else ""
    return first or None
