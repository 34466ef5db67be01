"""SearxNG (``SEARCH_API=searx``): a self-hosted metasearch instance's JSON API, with httpx.

``GET {SEARX_HOST}/search?q=&format=json``. No key. The instance must list ``json`` under
``search.formats`` in its ``settings.yml``; otherwise it answers 403, which the error message
says. SearXNG has no result-count parameter, so the activity's trimming applies ``max_results``.
"""

from __future__ import annotations

from typing import Any

from activities.web.search import missing_setting_error, register_provider, unavailable_error
from activities.web.search_providers._http import Call, HttpProvider, JsonSearch, float_or_none, plain_text, str_or_none
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

PROVIDER = HttpProvider(
    "SearxNG",
    base_url_env="SEARX_HOST",
    hints={403: "Enable the json format in the instance's settings.yml (search.formats), or check SEARX_HOST."},
)


@register_provider("searx")
class SearxSearch(JsonSearch):
    """One SearXNG request per query (first page): ``GET /search?format=json``; results come from ``results``."""

    provider = PROVIDER

    def base_url(self) -> str:
        if not self._settings.searx_host:
            raise missing_setting_error(PROVIDER.label, "SEARX_HOST", "an instance URL (e.g. http://localhost:8080)")
        return self._settings.searx_host

    def call(self, request: SearchRequest, api_key: str) -> Call:
        return Call("GET", "/search", {
            "follow_redirects": True,  # no key to leak; instances often redirect http -> https
            "params": {"q": request.query, "format": "json", "pageno": 1},
        })

    def parse(self, query: str, payload: dict[str, Any]) -> SearchResponse:
        return searx_response(query, payload)


def searx_response(query: str, payload: dict[str, Any]) -> SearchResponse:
    """``results[]`` to our contract.

    An empty answer whose engines all failed is a transient failure of the instance's upstreams,
    not "nothing found", so it is raised as retryable.
    """
    results = [
        SearchResult(
            title=plain_text(item.get("title")) or str(item["url"]),
            url=str(item["url"]),
            content=plain_text(item.get("content")),
            score=float_or_none(item.get("score")),
            published_date=str_or_none(item.get("publishedDate")),
        )
        for item in payload.get("results") or []
        if isinstance(item, dict) and item.get("url")
    ]
    unresponsive = payload.get("unresponsive_engines") or []
    if not results and unresponsive:
        names = ", ".join(" ".join(map(str, item)) if isinstance(item, list) else str(item) for item in unresponsive)
        raise unavailable_error(f"SearxNG found nothing because its engines failed: {names}.")
    return SearchResponse(query=str(payload.get("query") or query), results=results)
