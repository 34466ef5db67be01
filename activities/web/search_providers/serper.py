"""Serper (``SEARCH_API=serper``): Google results through serper.dev's JSON API, with httpx.

``POST {SERPER_BASE_URL}/search`` with ``{"q", "num"}`` and ``X-API-KEY``. Serper has no
maintained Python client of its own (LangChain's wrapper is one aiohttp call), so httpx is used
directly. A bad key comes back as 403 ``{"message": "Unauthorized.", "statusCode": 403}``.
"""

from __future__ import annotations

from typing import Any

import httpx

from activities.web.search import missing_setting_error, register_provider
from activities.web.search_providers._http import Call, HttpProvider, JsonSearch, http_error, plain_text, str_or_none
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

DEFAULT_BASE_URL = "https://google.serper.dev"
SERPER_MAX_NUM = 100
PROVIDER = HttpProvider("Serper", base_url_env="SERPER_BASE_URL", key_env="SERPER_API_KEY")


@register_provider("serper")
class SerperSearch(JsonSearch):
    """One Serper request per query: ``POST /search``; results come from ``organic``."""

    provider = PROVIDER

    def api_key(self) -> str:
        if not self._settings.serper_api_key:
            raise missing_setting_error(PROVIDER.label, "SERPER_API_KEY")
        return self._settings.serper_api_key

    def base_url(self) -> str:
        return self._settings.serper_base_url or DEFAULT_BASE_URL

    def call(self, request: SearchRequest, api_key: str) -> Call:
        return Call("POST", "/search", {
            "json": {"q": request.query, "num": min(max(request.max_results, 1), SERPER_MAX_NUM)},
            "headers": {"X-API-KEY": api_key},
        })

    def parse(self, query: str, payload: dict[str, Any]) -> SearchResponse:
        return serper_response(query, payload)

    def error(self, response: httpx.Response) -> Exception:
        # Serper answers a bad key with 403 "Unauthorized." rather than 401.
        unauthorized = response.status_code == 403 and "unauthorized" in response.text.lower()
        return http_error(PROVIDER, response, key_rejected=unauthorized)


def serper_response(query: str, payload: dict[str, Any]) -> SearchResponse:
    """``organic[]`` (title, link, snippet, date) to our contract, in Serper's ranking order."""
    results = [
        SearchResult(
            title=plain_text(item.get("title")) or str(item["link"]),
            url=str(item["link"]),
            content=plain_text(item.get("snippet")),
            published_date=str_or_none(item.get("date")),
        )
        for item in payload.get("organic") or []
        if isinstance(item, dict) and item.get("link")
    ]
    parameters = payload.get("searchParameters")
    echoed = parameters.get("q") if isinstance(parameters, dict) else None
    return SearchResponse(query=str(echoed or query), results=results)
